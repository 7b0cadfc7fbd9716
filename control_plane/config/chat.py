"""The gateway's settings (control_plane/gateway): each chat platform's credentials and who may talk,
a seam of their own (config/settings.py holds the core); `Settings.gateway` holds them."""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from .chat_access import ChatAccess, from_env
from .chat_wecom import WeComBotSettings, WeComSettings

_SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")


class TelegramSettings(ChatAccess):
    token: SecretStr
    """The bot token (`${TELEGRAM_BOT_TOKEN}`)."""
    base_url: str = "https://api.telegram.org/bot"
    """The Bot API base (a local Bot API server, or a test stand-in)."""
    base_file_url: str = "https://api.telegram.org/file/bot"
    poll_timeout: int = Field(30, ge=0, le=50)
    """Seconds one getUpdates long poll waits for updates."""
    mode: Literal["polling", "webhook"] = "polling"
    """How updates arrive: long polling (no public address needed), or Telegram POSTing each one to
    `webhook_url`, which a reverse proxy forwards to the gateway's listener on host:port/path."""
    webhook_url: str | None = None
    """The public HTTPS URL Telegram posts updates to (webhook mode; ports 443, 80, 88 or 8443)."""
    webhook_secret: SecretStr | None = None
    """The X-Telegram-Bot-Api-Secret-Token every update must carry (`${TELEGRAM_WEBHOOK_SECRET}`);
    unset, one is generated and kept in the profile's database."""
    host: str = "127.0.0.1"
    port: int = Field(8770, ge=0, le=65535)
    path: str = "/telegram"

    @field_validator("token", "webhook_secret", mode="before")
    @classmethod
    def _token(cls, value: Any) -> Any:
        return from_env(value)

    @model_validator(mode="after")
    def _webhook_has_url(self) -> TelegramSettings:
        if self.mode == "webhook" and not self.webhook_url:
            raise ValueError("mode: webhook needs webhook_url, the public URL Telegram posts updates to")
        secret = self.webhook_secret
        if secret is not None and not _SECRET_TOKEN.fullmatch(secret.get_secret_value()):
            raise ValueError("webhook_secret: 1 to 256 of A-Z, a-z, 0-9, _ and - (the Bot API's rule)")
        return self


class Backfilled(ChatAccess):
    """A platform whose missed messages are read back from its history (gateway/backfill.py)."""

    backfill_hours: float = Field(24.0, ge=0)
    """On each new connection, messages sent while the gateway was away are read from the history of
    each chat it has stored a message from and answered, back to at most this many hours (0: none)."""
    backfill_limit: int = Field(20, ge=0, le=100)
    """At most this many such messages per chat (and thread), the newest (0: none)."""


class SlackSettings(Backfilled):
    bot_token: SecretStr
    """The bot's token for the Web API, xoxb-... (`${SLACK_BOT_TOKEN}`)."""
    app_token: SecretStr
    """The app-level token for Socket Mode, xapp-... (`${SLACK_APP_TOKEN}`)."""
    base_url: str = "https://slack.com/api/"
    """The Web API base (a test stand-in)."""

    @field_validator("bot_token", "app_token", mode="before")
    @classmethod
    def _tokens(cls, value: Any) -> Any:
        return from_env(value)


class DiscordSettings(Backfilled):
    token: SecretStr
    """The bot token (`${DISCORD_BOT_TOKEN}`)."""
    api_base: str = "https://discord.com/api/v10"
    """The REST base; the gateway WebSocket URL comes from its GET /gateway/bot (a test stand-in)."""

    @field_validator("token", mode="before")
    @classmethod
    def _token(cls, value: Any) -> Any:
        return from_env(value)


class IrcSettings(ChatAccess):
    """An IRC network: the bot joins every channel in `allow_chats` and answers there when addressed by
    its nick (`hermetic: ...`), and in private messages."""

    host: str
    port: int = Field(6697, ge=1, le=65535)
    tls: bool = True
    tls_verify: bool = True
    nick: str = Field(min_length=1, max_length=30, pattern=r"^[A-Za-z\[\]\\`_^{|}][A-Za-z0-9\[\]\\`_^{|}-]*$")
    password: SecretStr | None = None
    """The server password (PASS), where the server asks for one (`${IRC_SERVER_PASSWORD}`)."""
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    """SASL PLAIN credentials (`${IRC_SASL_PASSWORD}`): the bot's registered account. A server that
    does not offer SASL is then refused rather than joined unauthenticated."""
    flood_burst: int = Field(5, ge=1)
    """Lines sent at once before pacing starts (the server's flood limit)."""
    flood_interval: float = Field(1.0, gt=0)
    """Seconds between lines once the burst is spent."""

    @field_validator("password", "sasl_password", mode="before")
    @classmethod
    def _secrets(cls, value: Any) -> Any:
        return from_env(value)


class XmppSettings(ChatAccess):
    """An XMPP account: one-to-one chats, and the MUC rooms of `allow_chats` (room JIDs), joined as
    `nick`, where the bot answers messages addressed to it (`nick: ...`). `allow_users` are bare JIDs."""

    jid: str = Field(pattern=r"^[^@/\s]+@[^@/\s]+$")
    """The bot's bare JID, e.g. hermetic@example.org."""
    password: SecretStr
    """The account's password (`${XMPP_PASSWORD}`)."""
    host: str | None = None
    port: int = Field(5222, ge=1, le=65535)
    """Where to connect (None: the JID's domain, by its DNS SRV records)."""
    tls: bool = True
    """STARTTLS required before the password goes out (False: only for a server on loopback)."""
    tls_verify: bool = True
    resource: str = "hermetic"
    nick: str = Field("hermetic", min_length=1)
    """The bot's nickname in MUC rooms."""
    file_hosts: list[str] = []
    """HTTP hosts (`host`, `host:port`, or `.domain` for any host under it) files are taken from: a
    message whose XEP-0066 URL (or whole body) is on one is downloaded into uploads/. Usually the
    server's HTTP File Upload host; none: no file is taken, and a user who sends one is told."""

    @field_validator("password", mode="before")
    @classmethod
    def _password(cls, value: Any) -> Any:
        return from_env(value)


def loopback(host: str) -> bool:
    """Whether `host` names this machine (a name or an address)."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class EmailSettings(ChatAccess):
    """A mailbox the bot reads over IMAP (woken by IDLE) and answers from over SMTP: one session per
    thread; `allow_users` are sender addresses (compared in lower case)."""

    address: str = Field(pattern=r"^[^@\s<>]+@[^@\s<>]+$")
    """The bot's address: the From of its replies, and the login unless `username` is set."""
    display_name: str = "Hermetic"
    username: str | None = None
    """The IMAP and SMTP login (default: `address`)."""
    password: SecretStr
    """The account's password (`${EMAIL_PASSWORD}`), for IMAP and SMTP."""
    imap_host: str
    imap_port: int = Field(993, ge=1, le=65535)
    imap_security: Literal["tls", "none"] = "tls"
    """IMAP over TLS (port 993); "none" only for a server on loopback."""
    mailbox: str = "INBOX"
    smtp_host: str
    smtp_port: int = Field(587, ge=1, le=65535)
    smtp_security: Literal["tls", "starttls", "none"] = "starttls"
    """Submission with STARTTLS (587) or TLS (465); "none" (no TLS, no login) only on loopback."""
    tls_verify: bool = True
    subject: str = "Hermetic"
    """The Subject of a mail that starts a thread (a scheduled job's result, `gateway send`)."""

    @field_validator("password", mode="before")
    @classmethod
    def _password(cls, value: Any) -> Any:
        return from_env(value)

    @field_validator("allow_users")
    @classmethod
    def _addresses(cls, value: list[str]) -> list[str]:
        return [address.strip().lower() for address in value]

    @model_validator(mode="after")
    def _plain_only_on_loopback(self) -> EmailSettings:
        for kind, host, security in (
            ("imap", self.imap_host, self.imap_security),
            ("smtp", self.smtp_host, self.smtp_security),
        ):
            if security == "none" and not loopback(host):
                raise ValueError(
                    f"{kind}_security: none sends the password in clear: only for a loopback host"
                )
        return self

    @property
    def login(self) -> str:
        return self.username or self.address


class MattermostSettings(Backfilled):
    url: str
    """The server, e.g. https://chat.example.com (the REST API is under /api/v4)."""
    token: SecretStr
    """The bot account's access token (`${MATTERMOST_TOKEN}`)."""
    actions_host: str = "127.0.0.1"
    actions_port: int = Field(8768, ge=0, le=65535)
    """Where the gateway listens for the server's button presses (interactive message actions)."""
    actions_url: str | None = None
    """The URL the Mattermost server POSTs a press to (default http://actions_host:actions_port/actions)."""
    command_tokens: list[SecretStr] = []
    """The tokens of the custom slash commands registered for the bot (`${MATTERMOST_COMMAND_TOKEN}`; one
    per command), whose requests the listener takes at /commands; none: slash-command requests are refused."""

    @field_validator("token", mode="before")
    @classmethod
    def _token(cls, value: Any) -> Any:
        return from_env(value)

    @field_validator("command_tokens", mode="before")
    @classmethod
    def _command_tokens(cls, value: Any) -> Any:
        return [from_env(token) for token in value] if isinstance(value, list) else value


class MatrixSettings(Backfilled):
    """A Matrix account on a homeserver: direct chats, and the rooms of `allow_chats` (room ids, !...:server)
    where the bot answers messages that mention it. `allow_users` are user ids (@name:server)."""

    homeserver: str
    """The client-server API base, e.g. https://matrix.example.org."""
    user_id: str = Field(pattern=r"^@[^:\s]+:\S+$")
    """The bot's user id, e.g. @hermetic:example.org."""
    password: SecretStr | None = None
    """The account's password (`${MATRIX_PASSWORD}`): the gateway logs in as `device_id`."""
    access_token: SecretStr | None = None
    """An access token instead of a password (`${MATRIX_ACCESS_TOKEN}`)."""
    device_id: str = "HERMETIC"
    """The device a password login takes (the same one each start)."""
    sync_timeout: float = Field(30.0, gt=0, le=300)
    """Seconds one /sync long poll waits for events."""

    @field_validator("password", "access_token", mode="before")
    @classmethod
    def _secrets(cls, value: Any) -> Any:
        return from_env(value)

    @model_validator(mode="after")
    def _credentials(self) -> MatrixSettings:
        if (self.password is None) == (self.access_token is None):
            raise ValueError("matrix: give one of password or access_token")
        return self


class WhatsAppSettings(ChatAccess):
    phone_id: str
    """The business phone number's id (WhatsApp Manager, API setup)."""
    token: SecretStr
    """A system user's access token for the Cloud API (`${WHATSAPP_TOKEN}`)."""
    app_secret: SecretStr
    """The Meta app's secret: each webhook POST is signed with it (X-Hub-Signature-256)."""
    verify_token: SecretStr
    """What the webhook's subscription check (GET hub.verify_token) must carry."""
    api_base: str = "https://graph.facebook.com"
    """The Graph API host (a test stand-in)."""
    host: str = "127.0.0.1"
    port: int = Field(8769, ge=0, le=65535)
    path: str = "/whatsapp"
    window_template: str = "hermetic_window_closed"
    """An approved template sent when a reply falls outside the 24-hour window: it tells the user that
    an answer is waiting and that any message from them reopens the chat."""
    window_template_language: str = "en_US"

    @field_validator("token", "app_secret", "verify_token", mode="before")
    @classmethod
    def _secrets(cls, value: Any) -> Any:
        return from_env(value)


class DingTalkSettings(ChatAccess):
    client_id: str
    """The app's AppKey (Client ID), from the DingTalk developer console; also its robot's code."""
    client_secret: SecretStr
    """The app's AppSecret (`${DINGTALK_CLIENT_SECRET}`)."""
    robot_code: str | None = None
    """The robot's code, when it differs from client_id."""
    card_template_id: str | None = None
    """An interactive card template (card builder) for questions' buttons, its callback set to Stream;
    unset, a question's choices are listed and answered by a reply."""
    api_base: str = "https://api.dingtalk.com"
    """The OpenAPI host: the Stream connection, tokens, messages, cards, files (a test stand-in)."""
    oapi_base: str = "https://oapi.dingtalk.com"
    """The legacy host of media uploads (files the agent sends)."""

    @field_validator("client_secret", mode="before")
    @classmethod
    def _secret(cls, value: Any) -> Any:
        return from_env(value)


class FeishuSettings(ChatAccess):
    app_id: str = Field(min_length=1)
    """The app's App ID (cli_...), from the Feishu / Lark developer console (a self-built app)."""
    app_secret: SecretStr
    """The app's App Secret (`${FEISHU_APP_SECRET}`)."""
    domain: str = "feishu"
    """Which service: `feishu` (open.feishu.cn), `lark` (open.larksuite.com), or an https URL (an
    http one only on loopback: a test stand-in)."""

    @field_validator("app_secret", mode="before")
    @classmethod
    def _secret(cls, value: Any) -> Any:
        return from_env(value)

    @field_validator("domain")
    @classmethod
    def _domain(cls, value: str) -> str:
        if value in ("feishu", "lark"):
            return value
        found = re.fullmatch(r"(https?)://([^/?#@]+)/?", value)
        loopback = found is not None and found.group(2).split(":")[0] in ("127.0.0.1", "localhost", "[::1]")
        if found is None or (found.group(1) == "http" and not loopback):
            raise ValueError("domain: feishu, lark, or an https://host[:port] URL")
        return value.rstrip("/")

    @property
    def base_url(self) -> str:
        """The open platform's origin every call goes to."""
        named = {"feishu": "https://open.feishu.cn", "lark": "https://open.larksuite.com"}
        return named.get(self.domain, self.domain)


class TeamsSettings(ChatAccess):
    app_id: str
    """The bot's Microsoft App ID (Azure Bot resource): the audience every inbound token must carry."""
    app_password: SecretStr
    """The app's client secret (`${TEAMS_APP_PASSWORD}`): the bot token is fetched with it."""
    tenant_id: str = "botframework.com"
    """The tenant the bot token is asked of (a single-tenant bot: its own tenant id)."""
    login_endpoint: str = "https://login.microsoftonline.com"
    """Where the bot token comes from: {login_endpoint}/{tenant_id}/oauth2/v2.0/token (a test stand-in)."""
    openid_metadata_url: str = "https://login.botframework.com/v1/.well-known/openidconfiguration"
    """The Bot Framework's OpenID metadata; its key set (…/keys beside it) signs inbound tokens."""
    host: str = "127.0.0.1"
    port: int = Field(3978, ge=0, le=65535)
    path: str = "/api/messages"
    """The messaging endpoint's path (the Azure Bot's messaging endpoint, through a reverse proxy)."""
    file_hosts: list[str] = [".sharepoint.com"]
    """Where files are read from and uploaded to, over https (http only on a loopback host): `host`,
    `host:port`, or `.domain` for any host under it. Teams keeps them in OneDrive for Business."""

    @field_validator("app_password", mode="before")
    @classmethod
    def _secrets(cls, value: Any) -> Any:
        return from_env(value)


class WebhookSettings(ChatAccess):
    secret: SecretStr
    """The HMAC-SHA256 key callers sign each body with (`${HERMETIC_WEBHOOK_SECRET}`)."""
    host: str = "127.0.0.1"
    port: int = Field(8767, ge=0, le=65535)
    path: str = "/webhook"
    reply_timeout: float = Field(300.0, gt=0)
    """Seconds a POST without a callback_url waits for the reply in its response."""
    max_skew: float = Field(300.0, gt=0)
    """Seconds a signed timestamp may differ from now (replays older than this are refused)."""

    @field_validator("secret", mode="before")
    @classmethod
    def _secret(cls, value: Any) -> Any:
        return from_env(value)


class GatewaySettings(BaseModel):
    """The messaging gateway (control_plane/gateway): one agent reached from chat platforms."""

    model_config = ConfigDict(extra="forbid")

    telegram: TelegramSettings | None = None
    slack: SlackSettings | None = None
    discord: DiscordSettings | None = None
    irc: IrcSettings | None = None
    xmpp: XmppSettings | None = None
    email: EmailSettings | None = None
    mattermost: MattermostSettings | None = None
    matrix: MatrixSettings | None = None
    whatsapp: WhatsAppSettings | None = None
    wecom: WeComSettings | None = None
    wecom_bot: WeComBotSettings | None = None
    dingtalk: DingTalkSettings | None = None
    feishu: FeishuSettings | None = None
    teams: TeamsSettings | None = None
    webhook: WebhookSettings | None = None
    in_serve: bool = False
    """Run the gateway inside `hermetic serve` too."""
    reset: Literal["never", "daily", "idle"] = "idle"
    """When a direct chat's session starts afresh without /new: never, at the first message of a new day,
    or after `idle_hours` without messages."""
    idle_hours: float = Field(24.0, gt=0)
    pairing_ttl: float = Field(3600.0, gt=0)
    """Seconds a pairing code stays valid."""
    lock_ttl: float = Field(30.0, ge=2)
    """Seconds a gateway's lock on a bot token outlives its last heartbeat (a crashed gateway's lock)."""
    reconnect_max: float = Field(30.0, gt=0)
    """Longest wait between reconnection attempts to a platform (the backoff doubles up to it)."""

    @property
    def platforms(self) -> dict[str, ChatAccess]:
        """The configured platforms by name."""
        found = {name: getattr(self, name) for name in PLATFORMS}
        return {name: config for name, config in found.items() if config is not None}


PLATFORMS: tuple[str, ...] = tuple(
    name
    for name, field in GatewaySettings.model_fields.items()
    if any(isinstance(arg, type) and issubclass(arg, ChatAccess) for arg in get_args(field.annotation))
)
"""Every platform the gateway can serve: the fields of GatewaySettings that configure one."""
