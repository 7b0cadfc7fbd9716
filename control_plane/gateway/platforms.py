"""The adapters of the platforms a profile configures, and sending a message to one chat by its
target string (`telegram:CHAT` or `telegram:CHAT:THREAD`), for deliveries such as scheduled jobs."""

from __future__ import annotations

from ..agent.agent import Agent
from ..config.settings import Settings
from ..tools import TOOLS, Registry
from ..tools.send_file import TOOLSET
from .base import Adapter
from .gateway import Gateway
from .records import GatewayStore
from .stream import LiveMessage


class UnknownTarget(ValueError):
    """A target string that names no configured platform, or is not `platform:chat[:thread]`."""


def build_adapters(settings: Settings, store: GatewayStore) -> list[Adapter]:
    """One adapter per configured platform (imported only when configured)."""
    adapters: list[Adapter] = []
    config = settings.gateway
    if config.telegram is not None:
        from .telegram import TelegramAdapter

        adapters.append(TelegramAdapter(config.telegram, store))
    if config.slack is not None:
        from .slack import SlackAdapter

        adapters.append(SlackAdapter(config.slack, store))
    if config.discord is not None:
        from .discord import DiscordAdapter

        adapters.append(DiscordAdapter(config.discord, store))
    if config.irc is not None:
        from .irc import IrcAdapter

        adapters.append(IrcAdapter(config.irc))
    if config.xmpp is not None:
        from .xmpp import XmppAdapter

        adapters.append(XmppAdapter(config.xmpp))
    if config.email is not None:
        from .email import EmailAdapter

        adapters.append(EmailAdapter(config.email, store))
    if config.mattermost is not None:
        from .mattermost import MattermostAdapter

        adapters.append(MattermostAdapter(config.mattermost, store))
    if config.matrix is not None:
        from .matrix import MatrixAdapter

        adapters.append(MatrixAdapter(config.matrix, store))
    if config.whatsapp is not None:
        from .whatsapp import WhatsAppAdapter

        adapters.append(WhatsAppAdapter(config.whatsapp))
    if config.wecom is not None:
        from .wecom import WeComAdapter

        adapters.append(WeComAdapter(config.wecom))
    if config.dingtalk is not None:
        from .dingtalk import DingTalkAdapter

        adapters.append(DingTalkAdapter(config.dingtalk))
    if config.teams is not None:
        from .teams import TeamsAdapter

        adapters.append(TeamsAdapter(config.teams, store))
    if config.webhook is not None:
        from .webhook import WebhookAdapter

        adapters.append(WebhookAdapter(config.webhook))
    return adapters


def create_gateway(settings: Settings, registry: Registry = TOOLS) -> Gateway:
    """The gateway of a profile: its agent (send_file's toolset added) and every configured platform."""
    if TOOLSET not in settings.toolsets:
        settings = settings.model_copy(update={"toolsets": [*settings.toolsets, TOOLSET]})
    store = GatewayStore(str(settings.database_url))
    agent = Agent(settings, registry=registry)
    return Gateway(agent, build_adapters(settings, store), store)


async def send_message(settings: Settings, target: str, text: str) -> list[str]:
    """Send `text` to the chat `target` names, split at the platform's limit; the ids of the messages.
    Raises UnknownTarget, and the adapter's AdapterError / RateLimited / ConnectionLost."""
    platform, _, rest = target.partition(":")
    chat, _, thread = rest.partition(":")
    if not chat:
        raise UnknownTarget(f"{target!r}: a target is platform:chat[:thread], e.g. telegram:123456")
    if platform == "webhook":
        raise UnknownTarget("the webhook platform answers requests; it has no chats to send to")
    store = GatewayStore(str(settings.database_url))
    try:
        adapter = next((a for a in build_adapters(settings, store) if a.platform == platform), None)
        if adapter is None:
            configured = ", ".join(settings.gateway.platforms) or "none"
            raise UnknownTarget(f"{target!r}: no {platform!r} in gateway settings (configured: {configured})")
        await adapter.connect()
        try:
            return await LiveMessage(adapter, chat, thread=thread or None).finish(text)
        finally:
            await adapter.disconnect()
    finally:
        store.close()
