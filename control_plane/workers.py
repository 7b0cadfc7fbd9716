"""The worker threads of the control plane's event loops, where `asyncio.to_thread` and
`run_in_executor(None, ...)` run a blocking call.

Python's default pool has cpu_count + 4 threads: six on two cores. The control plane's blocking calls
mostly wait rather than compute (a SQLite write waiting its turn for the database lock, a file, a DNS
lookup), so with twenty chats answered at once all six were waiting and every hop to a thread queued
behind them: in `python -m bench.gateway`'s 20-chat run a hop took 12-33 ms (median), the way from a
message to its model request 194-247 ms; with 32 threads, 0.3-0.9 ms a hop and 98-99 ms.
"""

from __future__ import annotations

import asyncio
import weakref
from concurrent.futures import ThreadPoolExecutor

from .models.router import warm_up

BLOCKING_WORKERS = 32
"""Threads for blocking calls per event loop (they are made as needed, up to this)."""

_given: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def give_blocking_pool() -> None:
    """Make the running loop's default executor a pool sized for calls that wait (once per loop)."""
    loop = asyncio.get_running_loop()
    if loop not in _given:
        loop.set_default_executor(
            ThreadPoolExecutor(BLOCKING_WORKERS, thread_name_prefix="hermetic-blocking")
        )
        _given.add(loop)


async def ready_to_serve() -> None:
    """First steps of a process answering many conversations on its loop (the API server, the gateway):
    the worker pool, then litellm imported in one of its threads. Left to the first turn, the import
    (seconds of CPU; the history's token count needs it) ran on the loop and held every other chat."""
    give_blocking_pool()
    await asyncio.to_thread(warm_up)
