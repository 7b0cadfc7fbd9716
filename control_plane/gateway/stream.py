"""A reply that streams by editing one message in place: edits paced to the platform's rate limit,
a 429's retry-after honoured, and the final text split into as many messages as the limit needs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .base import Adapter, Button, RateLimited
from .text import split

log = logging.getLogger("hermetic.gateway")
T = TypeVar("T")
MAX_WAITS = 5
"""Retries of one call the platform rate-limits before the call is given up (and logged)."""


async def patiently(call: Callable[[], Awaitable[T]]) -> T:
    """Make a platform call, waiting out each 429's retry-after (up to MAX_WAITS times)."""
    for _ in range(MAX_WAITS):
        try:
            return await call()
        except RateLimited as limited:
            log.info("rate limited: waiting %.1f s", limited.retry_after)
            await asyncio.sleep(limited.retry_after)
    return await call()


class LiveMessage:
    """One message the gateway keeps editing: `show(text)` while it grows, `finish(text)` at the end.

    Edits are coalesced: at most one per `interval` while streaming (the latest text wins); the final
    edit goes out at once. `message_id` given means the message exists already (a rerun after a crash
    edits the reply the killed run began instead of sending a second one).
    """

    def __init__(
        self,
        adapter: Adapter,
        chat: str,
        *,
        thread: str | None = None,
        interval: float = 1.0,
        message_id: str | None = None,
        on_sent: Callable[[str], None] | None = None,
        after: asyncio.Future[None] | None = None,
    ) -> None:
        self.adapter, self.chat, self.thread, self.interval = adapter, chat, thread, interval
        self.message_id = message_id
        self.on_sent = on_sent
        self.after = after
        """A call the message must not overtake (the typing indicator): its first send waits for it."""
        self._wanted = ""
        self._over: str | None = None
        """The text that first went over the limit (its first part is what shows while it grows)."""
        self._shown: str | None = None
        self._dirty = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def show(self, text: str) -> None:
        """The text so far (shown within the limit, cut with an ellipsis while it is longer). Once cut, the
        text that grows on the cut part shows the same cut: it is not split again at every token (the
        final split is `finish`'s)."""
        if self._over is not None and text.startswith(self._over):
            return
        limit = self.adapter.text_limit
        if self.adapter.length(text) > limit:
            self._over = text
            text = split(text, limit - 2, self.adapter.length)[0] + " …"
        self._wanted = text
        self._dirty.set()
        if self._pump is None:
            self._pump = asyncio.create_task(self._run())

    async def finish(self, text: str, buttons: list[Button] | None = None) -> list[str]:
        """Stop streaming and put the whole text out: the first part in this message, the rest as new
        messages after it. Returns the ids of every part."""
        parts = split(text or "…", self.adapter.text_limit, self.adapter.length)
        async with self._lock:
            # cancelled only under the lock: a pump cancelled inside its first send would leave the
            # message posted but its id unknown, and the final text would go out as a second message
            if self._pump is not None:
                self._pump.cancel()
                await asyncio.gather(self._pump, return_exceptions=True)
            await self._put(parts[0], buttons if len(parts) == 1 else None)
        ids = [self.message_id] if self.message_id else []
        for number, part in enumerate(parts[1:], 2):
            last = number == len(parts)
            ids.append(
                await patiently(
                    lambda part=part, last=last: self.adapter.send(  # type: ignore[misc]
                        self.chat, part, thread=self.thread, buttons=buttons if last else None
                    )
                )
            )
        await self.adapter.finished(self.chat, ids)
        return ids

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            async with self._lock:
                try:
                    await self._put(self._wanted)
                except Exception as exc:  # a failed interim edit must not end the reply; finish retries
                    log.warning("%s chat %s: edit failed: %s", self.adapter.platform, self.chat, exc)
            await asyncio.sleep(self.interval)  # the platform's pace for edits of one message

    async def _put(self, text: str, buttons: list[Button] | None = None) -> None:
        if text == self._shown and buttons is None:
            return
        if self.message_id is None:
            if self.after is not None:
                await asyncio.gather(self.after, return_exceptions=True)  # its failure is its own
            self.message_id = await patiently(
                lambda: self.adapter.send(self.chat, text, thread=self.thread, buttons=buttons)
            )
            if self.on_sent is not None:  # a store write: not on the loop every chat shares
                await asyncio.to_thread(self.on_sent, self.message_id)
        else:
            message_id = self.message_id
            await patiently(lambda: self.adapter.edit(self.chat, message_id, text, buttons=buttons))
        self._shown = text
