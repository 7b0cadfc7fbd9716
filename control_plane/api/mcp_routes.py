"""MCP over streamable HTTP at `/mcp` of `hermetic serve`, as `hermetic mcp serve --http` serves it alone:
the caller's bearer token picks the profile, and each profile has its own MCP server (mcp/server.py),
session manager and idle-sandbox reaper, started on its first request.

With replicas, a session this replica opens is recorded as its own (store/mcp_owners.py) before the
client learns its id, and api/forward.py sends the session's later requests here from any replica. The
2026-07-28 protocol has no sessions: any replica serves its requests.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope, Send

from ..mcp.server import McpSurface, build_server
from ..mcp.transports import start_reaper, unauthorized
from ..store.mcp_owners import McpOwners
from ..store.tokens import TokenStore
from .profiles import Hub, Profile

MCP_PATH = "/mcp"


@dataclass
class _Served:
    """One profile's MCP server in this process, running until `stop` is set."""

    profile: str
    surface: McpSurface
    manager: StreamableHTTPSessionManager
    owners: McpOwners | None
    reaper: threading.Event
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        running = asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                running.set()
                await self.stop.wait()

        self.task = asyncio.create_task(run())
        await running.wait()

    def watched(self, scope: Scope, send: Send) -> Send:
        """`send`, recording a session this request opens before its id reaches the client (whose next
        request may land on another replica), and forgetting one it ends or that is gone here."""
        owners = self.owners
        if owners is None:
            return send
        asked = Headers(scope=scope).get(MCP_SESSION_ID_HEADER)

        async def watching(message: Message) -> None:
            if message["type"] == "http.response.start":
                given = Headers(raw=message["headers"]).get(MCP_SESSION_ID_HEADER)
                if asked is None and given and message["status"] < 400:
                    await asyncio.to_thread(owners.opened, given, self.profile)
                elif asked and (scope["method"] == "DELETE" or message["status"] == 404):
                    await asyncio.to_thread(owners.closed, asked, self.profile)
            await send(message)

        return watching

    async def close(self) -> None:
        self.reaper.set()
        self.stop.set()
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)


class McpEndpoint:
    """The ASGI app at /mcp: bearer tokens only (MCP clients send one; no console cookie)."""

    def __init__(self, hub: Hub, tokens: TokenStore) -> None:
        self.hub, self.tokens = hub, tokens
        self._served: dict[str, _Served] = {}
        self._starting = asyncio.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        profile = await asyncio.to_thread(self._profile, scope)
        if profile is None:
            return await unauthorized(send)
        served = await self._serving(profile)
        await served.manager.handle_request(scope, receive, served.watched(scope, send))

    def _profile(self, scope: Scope) -> Profile | None:
        scheme, _, token = Headers(scope=scope).get("authorization", "").partition(" ")
        name = self.tokens.profile_of(token.strip()) if scheme.lower() == "bearer" else None
        return self.hub.profile(name) if name else None

    async def _serving(self, profile: Profile) -> _Served:
        name = profile.settings.profile
        async with self._starting:
            if name not in self._served:
                surface = McpSurface(profile.agent)
                manager = StreamableHTTPSessionManager(
                    build_server(surface), session_idle_timeout=profile.settings.mcp.idle_seconds
                )  # no DNS-rebinding host check: every request carries a bearer token, and a forwarded
                # one names the owner's address as its host
                owners = profile.replication.mcp if profile.replication is not None else None
                served = _Served(name, surface, manager, owners, start_reaper(surface))
                await served.start()
                self._served[name] = served
            return self._served[name]

    async def close(self) -> None:
        for served in self._served.values():
            await served.close()
