"""WeCom's two ways in, and what they share: a self-built application in callback mode (one-to-one
chats, replies through the server API) and an intelligent robot in API mode (one-to-one and group chats
where it is @-mentioned, replies streamed in answer to WeCom's callbacks)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from .chat_access import ChatAccess, from_env


class WeComCallbacks(ChatAccess):
    """The encrypted callbacks both kinds receive: signed with the Token, encrypted with the
    EncodingAESKey, POSTed to the gateway's listener on host:port/path."""

    token: SecretStr
    """The callback Token (API receiving settings) that signs each callback."""
    encoding_aes_key: SecretStr
    """The callback EncodingAESKey (43 characters) that encrypts each callback."""
    host: str = "127.0.0.1"
    port: int = Field(8771, ge=0, le=65535)
    path: str = "/wecom"

    @field_validator("token", "encoding_aes_key", mode="before")
    @classmethod
    def _callback_secrets(cls, value: Any) -> Any:
        return from_env(value)

    @field_validator("encoding_aes_key")
    @classmethod
    def _aes_key(cls, value: SecretStr) -> SecretStr:
        key = value.get_secret_value()
        if not re.fullmatch(r"[A-Za-z0-9+/]{43}", key):
            raise ValueError("encoding_aes_key: the 43 characters (A-Z, a-z, 0-9, + and /) WeCom generated")
        return value


class WeComSettings(WeComCallbacks):
    """A WeCom (WeChat Work) self-built application in callback mode: WeCom POSTs each message, encrypted,
    to the gateway's listener on host:port/path; replies go out through the application message API."""

    corp_id: str = Field(min_length=1)
    """The CorpID (My Company, Company Information): every callback's receiveid must be it."""
    agent_id: int
    """The application's AgentId."""
    secret: SecretStr
    """The application's Secret, for gettoken (`${WECOM_SECRET}`)."""
    api_base: str = "https://qyapi.weixin.qq.com"
    """The server API host (a test stand-in)."""
    message_format: Literal["text", "markdown"] = "text"
    """Replies as text messages (shown everywhere; the model's Markdown becomes plain text) or markdown
    messages (rendered by the WeCom app, not shown in WeChat)."""

    @field_validator("secret", mode="before")
    @classmethod
    def _secret(cls, value: Any) -> Any:
        return from_env(value)


class WeComBotSettings(WeComCallbacks):
    """A WeCom intelligent robot (智能机器人) in API mode: WeCom POSTs each message sent to it one-to-one
    or @-mentioning it in a group, encrypted, to host:port/path; the reply is streamed in the answers to
    WeCom's stream-refresh callbacks, and what outlives them goes through the message's response_url."""

    bot_id: str = Field(min_length=1)
    """The robot's BotID (aibotid): a callback for another robot is ignored."""
    name: str = ""
    """The robot's name as a mention shows it (`@name`): removed from a group message wherever it stands
    (empty: a leading @mention is removed)."""
    port: int = Field(8772, ge=0, le=65535)
    path: str = "/wecom-bot"
    progress: Literal["off", "new", "all"] = "off"
    """Off: each message has one reply bubble (its stream), which progress lines would take."""
    stream_window: float = Field(330.0, gt=0, le=360)
    """Seconds after a message in which its reply is streamed: WeCom asks for the stream for 6 minutes
    from the message; a reply finished later goes through the message's response_url."""
    press_wait: float = Field(4.0, gt=0, lt=5)
    """Seconds a card press's callback waits for the card's new text (WeCom drops it after 5 s)."""
