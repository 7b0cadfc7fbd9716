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


async def refuse(send: Send, status: int, message: str, code: int = -32600, **headers: str) -> None:
    """An HTTP error whose body is a JSON-RPC error without an id (as the SDK answers its own)."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()
    raw = [(b"content-type", b"application/json")] + [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def unauthorized(send: Send, profile: str | None = None) -> None:
    whose = f"of profile {profile} " if profile else ""
    await refuse(send, 401, f"a bearer token {whose}is required", -32001, **{"www-authenticate": "Bearer"})


class BearerGate:
    """ASGI middleware: only requests with a token of `profile` reach the MCP app; others get 401."""

    def __init__(self, app: ASGIApp, tokens: TokenStore, profile: str) -> None:
        self.app = app
        self.tokens = tokens
        self.profile = profile

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._allowed(dict(scope["headers"]).get(b"authorization", b"")):
            return await unauthorized(send, self.profile)
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
        stop = start_reaper(surface)
        try:
            async with inner_lifespan(app_):
                yield
        finally:
            stop.set()

    app.router.lifespan_context = lifespan
    return BearerGate(app, tokens, settings.profile)


def start_reaper(surface: McpSurface) -> threading.Event:
    """Close the sandboxes of the surface's sessions idle for `mcp.idle_seconds`, in a thread, until the
    event it returns is set."""
    idle_seconds = surface.agent.settings.mcp.idle_seconds
    stop = threading.Event()

    def reap() -> None:
        while not stop.wait(max(1.0, idle_seconds / 4)):
            surface.reap(idle_seconds)

    threading.Thread(target=reap, name="mcp-reaper", daemon=True).start()
    return stop
