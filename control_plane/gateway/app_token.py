"""An app's access token (DingTalk's, Feishu's, Teams', WeCom's), kept until shortly before it expires."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

EARLY = 300.0
"""Seconds before its stated expiry a token is replaced (a call in flight must not carry an expired one);
a token that lives less than twice that is kept for half its life."""


class AppToken:
    """`await token.get()`: the kept token, or a new one from `fetch` (the token and its lifetime in
    seconds), fetched once however many calls wait for it. `get(stale=t)` when the platform refused `t`
    (revoked, or expired early); `forget()` to have the next call fetch one whatever is kept."""

    def __init__(self, fetch: Callable[[], Awaitable[tuple[str, float]]]) -> None:
        self._fetch = fetch
        self._token: str | None = None
        self._expires = 0.0
        self._lock = asyncio.Lock()

    async def get(self, stale: str | None = None) -> str:
        """The token; a new one when it is near its expiry or is `stale` (and not yet replaced)."""
        async with self._lock:
            if self._token is not None and self._token != stale and time.monotonic() < self._expires:
                return self._token
            token, lifetime = await self._fetch()
            self._token, self._expires = token, time.monotonic() + max(lifetime - EARLY, lifetime / 2)
            return token

    def forget(self) -> None:
        self._token = None
