"""The transports of `hermetic mcp serve`: stdio (the process is the session), and streamable HTTP
behind a bearer token of the served profile (the API's tokens, `hermetic token create`)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.stdio import stdio_server
from starlette.types import ASGIApp, Receive, Scope, Send

from ..store.tokens import TokenStore
from .server import McpSurface, build_server


async def serve_stdio(surface: McpSurface) -> None:
    server = build_server(surface)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


class BearerGate:
    """ASGI middleware: only requests with a token of `profile` reach the MCP app; others get 401."""

    def __init__(self, app: ASGIApp, tokens: TokenStore, profile: str) -> None:
        self.app = app
        self.tokens = tokens
        self.profile = profile

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._allowed(dict(scope["headers"]).get(b"authorization", b"")):
            body = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {
                        "code": -32001,
                        "message": f"a bearer token of profile {self.profile} is required",
                    },
                }
            ).encode()
            headers = [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def _allowed(self, header: bytes) -> bool:
        scheme, _, token = header.decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and self.tokens.profile_of(token.strip()) == self.profile


def http_app(surface: McpSurface, tokens: TokenStore, host: str) -> ASGIApp:
    """The streamable HTTP app at /mcp, its idle sandboxes reaped while it runs."""
    settings = surface.agent.settings
    app = build_server(surface).streamable_http_app(host=host, session_idle_timeout=settings.mcp.idle_seconds)
    inner_lifespan = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(app_: Any) -> AsyncIterator[None]:
        stop = threading.Event()
        reaper = threading.Thread(
            target=_reap, args=(surface, settings.mcp.idle_seconds, stop), name="mcp-reaper", daemon=True
        )
        reaper.start()
        try:
            async with inner_lifespan(app_):
                yield
        finally:
            stop.set()

    app.router.lifespan_context = lifespan
    return BearerGate(app, tokens, settings.profile)


def _reap(surface: McpSurface, idle_seconds: float, stop: threading.Event) -> None:
    while not stop.wait(max(1.0, idle_seconds / 4)):
        surface.reap(idle_seconds)
