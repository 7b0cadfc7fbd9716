"""Each chat's latest stored message, for platforms whose replies point at it (Teams' Reply to
Activity, WhatsApp's typing indicator, which marks that message read)."""

from __future__ import annotations

import asyncio

from .records import GatewayStore


class LatestInbound:
    """Kept as messages are stored; read back from the store for a chat not heard from since the start,
    so a message answered after a restart (a rerun, a scheduled delivery) still finds it."""

    def __init__(self, store: GatewayStore, platform: str) -> None:
        self.store, self.platform = store, platform
        self._ids: dict[str, str] = {}

    def stored(self, chat: str, message_id: str) -> None:
        self._ids[chat] = message_id

    async def get(self, chat: str) -> str | None:
        if chat not in self._ids:
            record = await asyncio.to_thread(self.store.last_inbound, self.platform, chat)
            if record is None:
                return None  # nothing from this chat yet: not remembered, a first message may come
            self._ids[chat] = record.message_id
        return self._ids[chat]
