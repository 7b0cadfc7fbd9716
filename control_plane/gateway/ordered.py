"""Inbound messages handed to the gateway at once across chats and in order within each chat: one chat's
message waits only for that chat's earlier ones, not for every other chat's store (each a hop to a
worker thread and back, on a loop busy with every chat's replies)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class NotStored(Exception):
    """An earlier message of the chat failed, so this one was left alone too (a chat stays in order)."""


class PerChat:
    def __init__(self) -> None:
        self._tails: dict[str, asyncio.Task[None]] = {}
        """Each chat's latest work; it waits for the one before it."""

    def submit(self, chat: str, work: Callable[[], Awaitable[object]]) -> asyncio.Task[None]:
        """Start `work` once the chat's earlier work is done; NotStored, without it, if that failed."""
        before = self._tails.get(chat)

        async def in_turn() -> None:
            if before is not None:
                await asyncio.wait([before])
                if before.cancelled() or before.exception() is not None:
                    raise NotStored(f"chat {chat}: an earlier message failed")
            await work()

        task = asyncio.create_task(in_turn())
        self._tails[chat] = task
        task.add_done_callback(lambda done: self._done(chat, done))
        return task

    def _done(self, chat: str, task: asyncio.Task[None]) -> None:
        if self._tails.get(chat) is task:
            del self._tails[chat]

    async def drain(self) -> None:
        """Wait until everything submitted so far is done."""
        if self._tails:
            await asyncio.wait(list(self._tails.values()))

    async def cancel(self) -> None:
        """Cancel what is still pending (the platform's receiving stops)."""
        pending = list(self._tails.values())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


async def each_in_order(items: list[tuple[str, Callable[[], Awaitable[object]]]]) -> None:
    """Run a batch of (chat, work): chats at once, each chat's in the batch's order. Raises the first error
    once all are done."""
    chats = PerChat()
    done = await asyncio.gather(*(chats.submit(chat, work) for chat, work in items), return_exceptions=True)
    for outcome in done:
        if isinstance(outcome, BaseException):
            raise outcome
