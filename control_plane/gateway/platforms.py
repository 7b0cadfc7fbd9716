"""The adapters of the platforms a profile configures, and sending a message to one chat by its
target string (`telegram:CHAT` or `telegram:CHAT:THREAD`), for deliveries such as scheduled jobs."""

from __future__ import annotations

import importlib

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


ADAPTERS: dict[str, tuple[str, bool]] = {
    "telegram": ("TelegramAdapter", True),
    "slack": ("SlackAdapter", True),
    "discord": ("DiscordAdapter", True),
    "irc": ("IrcAdapter", False),
    "xmpp": ("XmppAdapter", False),
    "email": ("EmailAdapter", True),
    "mattermost": ("MattermostAdapter", True),
    "matrix": ("MatrixAdapter", True),
    "whatsapp": ("WhatsAppAdapter", True),
    "wecom": ("WeComAdapter", False),
    "wecom_bot": ("WeComBotAdapter", True),
    "dingtalk": ("DingTalkAdapter", False),
    "feishu": ("FeishuAdapter", False),
    "teams": ("TeamsAdapter", True),
    "webhook": ("WebhookAdapter", False),
}
"""Each platform's adapter class (in the module of the platform's name) and whether it takes the gateway's
store (for what it keeps between runs: a poll offset, a sync token, a conversation's service URL)."""


def build_adapters(settings: Settings, store: GatewayStore) -> list[Adapter]:
    """One adapter per configured platform (its module imported only when configured)."""
    adapters: list[Adapter] = []
    for name, config in settings.gateway.platforms.items():
        class_name, stored = ADAPTERS[name]
        adapter_class = getattr(importlib.import_module(f"{__package__}.{name}"), class_name)
        adapters.append(adapter_class(config, store) if stored else adapter_class(config))
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
