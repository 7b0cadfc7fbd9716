"""Inbound messages handled at once across chats and in order within each chat: one chat's message waits
only for that chat's earlier ones, not for every other chat's store (each a hop to a worker thread and
back, on a loop busy with every chat's replies). Work runs in the order it was submitted, so a platform
that hands messages over concurrently (a task per frame, a request per message) keeps each chat's order
by submitting before its first wait."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class NotStored(Exception):
    """An earlier message of the chat failed, so this one was left alone too (a chat stays in order)."""


class PerChat:
    def __init__(self) -> None:
        self._tails: dict[str, asyncio.Task[object]] = {}
        """Each chat's latest work; it waits for the one before it."""
        self._pending: dict[str, int] = {}
        """Each chat's submitted work not yet done."""

    def pending(self, chat: str) -> int:
        """How many of the chat's submitted works are running or waiting their turn."""
        return self._pending.get(chat, 0)

    def submit(self, chat: str, work: Callable[[], Awaitable[T]]) -> asyncio.Task[T]:
        """Start `work` once the chat's earlier work is done; NotStored, without it, if that failed."""
        before = self._tails.get(chat)

        async def in_turn() -> T:
            if before is not None:
                await asyncio.wait([before])
                if before.cancelled() or before.exception() is not None:
                    raise NotStored(f"chat {chat}: an earlier message failed")
            return await work()

        task = asyncio.create_task(in_turn())
        self._tails[chat] = task
        self._pending[chat] = self._pending.get(chat, 0) + 1
        task.add_done_callback(lambda done: self._done(chat, done))
        return task

    def _done(self, chat: str, task: asyncio.Task[object]) -> None:
        if self._tails.get(chat) is task:
            del self._tails[chat]
        if (left := self._pending[chat] - 1) > 0:
            self._pending[chat] = left
        else:
            del self._pending[chat]

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
