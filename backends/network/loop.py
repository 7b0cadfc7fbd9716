"""The process's network event loop: one asyncio loop in a daemon thread for the egress proxy and the
exposed ports, so neither costs a thread per sandbox and both are driven from synchronous backends."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

_LOOP: asyncio.AbstractEventLoop | None = None
_LOCK = threading.Lock()


def network_loop() -> asyncio.AbstractEventLoop:
    """The loop, started on first use; it runs as long as the process."""
    global _LOOP
    with _LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="hermetic-network", daemon=True).start()
        return _LOOP


def on_loop(coro: Awaitable[T]) -> T:
    """Run a coroutine on the network loop from any other thread and wait for its result."""

    async def wrapper() -> Any:
        return await coro

    result: T = asyncio.run_coroutine_threadsafe(wrapper(), network_loop()).result()
    return result
