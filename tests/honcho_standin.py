"""A loopback stand-in for Honcho's v3 HTTP API, the part the `honcho` memory provider uses, written from
Honcho's published API reference (docs.honcho.dev/v3/api-reference): get-or-create a workspace, a peer
and a session (POST with an `id`), add messages to a session, and a peer's representation. The real
honcho-ai SDK talks to it; `requests` records every call (method, path, body) for the test to check.

Its "representation" is what Honcho's deriver would build from a peer's messages, reduced to the
simplest honest form: the peer's stored messages, newest first, that share a word with the search query.
"""

from __future__ import annotations

import datetime
import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_WORKSPACES = re.compile(r"^/v3/workspaces$")
_CREATE = re.compile(r"^/v3/workspaces/([^/]+)/(peers|sessions)$")
_MESSAGES = re.compile(r"^/v3/workspaces/([^/]+)/sessions/([^/]+)/messages$")
_REPRESENTATION = re.compile(r"^/v3/workspaces/([^/]+)/peers/([^/]+)/representation$")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


class HonchoStandin:
    def __init__(self, api_key: str = "honcho-test-key") -> None:
        self.api_key = api_key
        self.requests: list[tuple[str, str, Any]] = []
        self.messages: list[dict[str, Any]] = []
        self.delay = threading.Event()
        """While cleared, representation requests hang (a provider that does not answer)."""
        self.delay.set()
        self.representation_override: str | None = None
        """When set, the representation returned, whatever was stored (e.g. a prompt injection)."""
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.standin = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> HonchoStandin:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.delay.set()
        self._server.shutdown()
        self._server.server_close()

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        with self._lock:
            self.requests.append((method, path, body))
        if method != "POST":
            return 405, {"detail": f"{method} {path} is not served here"}
        if _WORKSPACES.match(path):
            return 200, {"id": body["id"], "metadata": {}, "configuration": {}, "created_at": _now()}
        if m := _CREATE.match(path):
            workspace, kind = m.groups()
            shape = {"id": body["id"], "workspace_id": workspace, "metadata": {}, "configuration": {}}
            shape["created_at"] = _now()
            return 200, shape | ({"is_active": True} if kind == "sessions" else {})
        if m := _MESSAGES.match(path):
            workspace, session = m.groups()
            created = [
                {
                    "id": uuid.uuid4().hex,
                    "content": message["content"],
                    "peer_id": message["peer_id"],
                    "session_id": session,
                    "metadata": message.get("metadata") or {},
                    "created_at": _now(),
                    "workspace_id": workspace,
                    "token_count": len(message["content"].split()),
                }
                for message in body["messages"]
            ]
            with self._lock:
                self.messages += created
            return 200, created
        if m := _REPRESENTATION.match(path):
            self.delay.wait()
            if self.representation_override is not None:
                return 200, {"representation": self.representation_override}
            words = set(re.findall(r"\w+", str(body.get("search_query", "")).lower()))
            with self._lock:
                mine = [x["content"] for x in reversed(self.messages) if x["peer_id"] == m.group(2)]
            relevant = [c for c in mine if words & set(re.findall(r"\w+", c.lower()))]
            return 200, {"representation": "\n".join(f"- {c}" for c in relevant[:5])}
        return 404, {"detail": f"no route {path}"}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self._answer("POST")

    def do_GET(self) -> None:
        self._answer("GET")

    def _answer(self, method: str) -> None:
        standin: HonchoStandin = self.server.standin  # type: ignore[attr-defined]
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Authorization") != f"Bearer {standin.api_key}":
            status, data = 401, {"detail": "Invalid API key"}
        else:
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                status, data = 422, {"detail": "body is not JSON"}
            else:
                status, data = standin.handle(method, self.path.split("?")[0], body)
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
