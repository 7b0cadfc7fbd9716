"""The running gateway as the scheduler's way into chats: `telegram:CHAT[:THREAD]` (and slack:, discord:)
job results go out through the live adapter, and a session's own chat is its origin (`here`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from ..scheduler.delivery import DeliveryContext, DeliveryError, Message, register_origin, register_target
from .base import Adapter
from .stream import LiveMessage


class ChatTarget:
    """One platform's chats as delivery targets, sent on the gateway's own event loop."""

    def __init__(self, adapter: Adapter, loop: asyncio.AbstractEventLoop) -> None:
        self.adapter, self.loop = adapter, loop

    def check(self, address: str) -> None:
        if not address.split(":", 1)[0].strip():
            raise DeliveryError(
                f"{self.adapter.platform} target {address!r}: give the chat id (CHAT[:THREAD])"
            )

    async def send(self, address: str, message: Message, ctx: DeliveryContext) -> str:
        chat, _, thread = address.partition(":")
        head = f"{message.job_name}: {message.status}\n\n" if message.status != "ok" else ""
        reply = LiveMessage(self.adapter, chat, thread=thread or None)
        done = reply.finish(head + message.text)
        if asyncio.get_running_loop() is self.loop:
            ids = await done
        else:  # the scheduler runs on another loop: the adapter's client belongs to the gateway's
            ids = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(done, self.loop))
        return f"sent as {len(ids)} message(s)"


def register(adapters: Iterable[Adapter], origin_of: Callable[[str], str | None]) -> None:
    """Offer a running gateway's chat platforms (the webhook has no chats) to the scheduler, and its
    `origin_of(session_id)`: the chat a session talks in."""
    loop = asyncio.get_running_loop()
    for adapter in adapters:
        if not adapter.authenticates:
            register_target(adapter.platform, ChatTarget(adapter, loop))
    register_origin(origin_of)
