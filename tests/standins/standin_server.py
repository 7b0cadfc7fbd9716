"""What the chat-platform stand-ins share: an aiohttp app on 127.0.0.1, served from an event loop in a
thread of its own, so a test (any thread) drives it and waits on what it recorded."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web


class StandinServer:
    """A subclass builds its routes in `_app`, sets its own state, then calls `__init__` (which starts
    listening); it records under `_changed` and notifies, which is what `wait_for` waits on."""

    def __init__(self, name: str) -> None:
        self.port = 0
        self._changed = threading.Condition()
        self._runner: web.AppRunner | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._run(self._start())

    def _app(self) -> web.Application:
        """The stand-in's routes (called on the loop, at each start)."""
        raise NotImplementedError

    def _progress(self) -> object:
        """What a `wait_for` that timed out shows: the calls so far."""
        raise NotImplementedError

    def wait_for(self, check: Callable[[], Any], timeout: float = 120.0) -> Any:
        """Wait until `check()` is truthy (re-checked whenever a call arrives); its value."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not (found := check()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out; calls so far: {self._progress()}")
                self._changed.wait(left)
            return found

    def close(self) -> None:
        """Stop listening, end what still runs on the loop (open sockets, long polls), stop the loop."""
        self._run(self._stop())
        self._run(self._cancel_rest())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run `coro` on the stand-in's loop from the test's thread; its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _start(self, port: int = 0) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        # reuse_address: a restart listens again on the same port at once
        await web.TCPSite(self._runner, "127.0.0.1", port, reuse_address=True).start()
        self.port = self._runner.addresses[0][1]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _cancel_rest(self) -> None:
        rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)


def wait_listening(port: int, timeout: float = 120) -> None:
    """Until something accepts connections on 127.0.0.1:port (a gateway's listener opening as it starts)."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert time.monotonic() < deadline, f"nothing ever listened on port {port}"
        time.sleep(0.02)
