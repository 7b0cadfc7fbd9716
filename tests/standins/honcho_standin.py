"""A loopback stand-in for Honcho's v3 HTTP API, the part the `honcho` memory provider uses, written from
Honcho's published API reference (docs.honcho.dev/v3/api-reference): get-or-create a workspace, a peer
and a session (POST with an `id`), add messages to a session, and a peer's representation. The real
honcho-ai SDK talks to it; `requests` records every call (method, path, body) for the test to check.

Its "representation" is what Honcho's deriver would build from a peer's messages, reduced to the
simplest honest form: the peer's stored messages, newest first, that share a word with the search query.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import threading
import uuid
from typing import Any

from aiohttp import web
from standin_server import StandinServer

V3 = "/v3/workspaces"
BODY = web.RequestKey("body", dict)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


class HonchoStandin(StandinServer):
    def __init__(self, api_key: str = "honcho-test-key") -> None:
        self.api_key = api_key
        self.requests: list[tuple[str, str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.delay = threading.Event()
        """While cleared, representation requests hang (a provider that does not answer)."""
        self.delay.set()
        self.representation_override: str | None = None
        """When set, the representation returned, whatever was stored (e.g. a prompt injection)."""
        super().__init__("honcho-standin")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HonchoStandin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.delay.set()
        self.close()

    def _progress(self) -> object:
        return self.requests

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._record])
        app.router.add_post(V3, self._workspace)
        app.router.add_post(V3 + "/{workspace}/peers", self._create)
        app.router.add_post(V3 + "/{workspace}/sessions", self._create)
        app.router.add_post(V3 + "/{workspace}/sessions/{session}/messages", self._add_messages)
        app.router.add_post(V3 + "/{workspace}/peers/{peer}/representation", self._representation)
        return app

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"detail": "Invalid API key"}, status=401)
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return web.json_response({"detail": "body is not JSON"}, status=422)
        with self._changed:
            self.requests.append((request.method, request.path, body))
            self._changed.notify_all()
        request[BODY] = body
        return await handler(request)

    async def _workspace(self, request: web.Request) -> web.Response:
        body = request[BODY]
        return web.json_response(
            {"id": body["id"], "metadata": {}, "configuration": {}, "created_at": _now()}
        )

    async def _create(self, request: web.Request) -> web.Response:
        """A peer or a session, got or created by its id."""
        shape = {"id": request[BODY]["id"], "workspace_id": request.match_info["workspace"], "metadata": {}}
        shape |= {"configuration": {}, "created_at": _now()}
        return web.json_response(shape | ({"is_active": True} if request.path.endswith("/sessions") else {}))

    async def _add_messages(self, request: web.Request) -> web.Response:
        created = [
            {
                "id": uuid.uuid4().hex,
                "content": message["content"],
                "peer_id": message["peer_id"],
                "session_id": request.match_info["session"],
                "metadata": message.get("metadata") or {},
                "created_at": _now(),
                "workspace_id": request.match_info["workspace"],
                "token_count": len(message["content"].split()),
            }
            for message in request[BODY]["messages"]
        ]
        with self._changed:
            self.messages += created
        return web.json_response(created)

    async def _representation(self, request: web.Request) -> web.Response:
        await asyncio.to_thread(self.delay.wait)
        if self.representation_override is not None:
            return web.json_response({"representation": self.representation_override})
        words = set(re.findall(r"\w+", str(request[BODY].get("search_query", "")).lower()))
        with self._changed:
            mine = [
                m["content"] for m in reversed(self.messages) if m["peer_id"] == request.match_info["peer"]
            ]
        relevant = [c for c in mine if words & set(re.findall(r"\w+", c.lower()))]
        return web.json_response({"representation": "\n".join(f"- {c}" for c in relevant[:5])})
