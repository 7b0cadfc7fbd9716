"""Catching up with what a platform holds but never delivered (sent while the gateway was down, or past
the platform's own redelivery): on each new connection, the history of every chat the store has a message
from is read after the last one stored there, within the platform's `backfill_hours` and `backfill_limit`,
and delivered like any message (the store recognises one it has already)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from ..config.chat import Backfilled
from .base import AdapterError, ConnectionLost, Deliver, Inbound
from .records import GatewayStore

log = logging.getLogger("hermetic.gateway.backfill")

ReadHistory = Callable[[Inbound, float, int], Awaitable[list[Inbound]]]
"""(the last message stored from a chat, the oldest time to go back to, how many at most) -> the
users' messages after it, oldest first. Raises AdapterError, ConnectionLost."""


async def catch_up(
    store: GatewayStore, platform: str, settings: Backfilled, read: ReadHistory, deliver: Deliver
) -> None:
    hours, limit = settings.backfill_hours, settings.backfill_limit
    if not hours or not limit:
        return
    since = time.time() - hours * 3600
    for record in await asyncio.to_thread(store.latest_per_chat, platform):
        seen = Inbound.model_validate(record.payload)
        try:
            missed = await read(seen, since, limit)
        except (AdapterError, ConnectionLost) as exc:
            log.warning("%s: cannot read the history of chat %s: %s", platform, seen.chat, exc)
            continue
        place = {"chat": seen.chat, "thread": seen.thread, "direct": seen.direct}
        for message in missed:  # the chat's kind as first seen (a history does not always say it)
            await deliver(message.model_copy(update=place))
