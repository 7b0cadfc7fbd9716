"""The one way an adapter serves HTTP for its platform to call (webhooks, interaction callbacks): an
aiohttp app on host:port, inside the gateway's event loop (so beside `hermetic serve` too)."""

from __future__ import annotations

from aiohttp import web

from .base import ConnectionLost


async def listen(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve `app` on host:port (0 picks a free port); the runner (cleanup() stops it) and the port."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise ConnectionLost(f"cannot listen on {host}:{port}: {exc}") from exc
    return runner, runner.addresses[0][1]
