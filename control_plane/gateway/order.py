"""A chat's messages stored in the order they arrived, where a platform hands them over concurrently
(a task per frame, a request per message): each takes its chat's lock in arrival order, since a task
runs up to its first wait in the order it was started, and asyncio's lock wakes its waiters in order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class ArrivalOrder:
    def __init__(self) -> None:
        self._chats: dict[str, tuple[asyncio.Lock, int]] = {}
        """chat -> its lock, and how many hold or wait for it (the entry goes with the last)."""

    @asynccontextmanager
    async def turn(self, chat: str) -> AsyncIterator[None]:
        """Held while one message of `chat` is checked and stored; take it before any other wait."""
        lock, users = self._chats.get(chat, (asyncio.Lock(), 0))
        self._chats[chat] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._chats[chat]
            if users == 1:
                del self._chats[chat]
            else:
                self._chats[chat] = (lock, users - 1)
