"""A local stand-in of Slack's Web API and Socket Mode (https://api.slack.com/apis/socket-mode,
https://api.slack.com/methods), for slack_sdk to talk to through `base_url`. It records what it was sent.

Implemented: auth.test; apps.connections.open (app token as the bearer, answers the WebSocket URL);
the Socket Mode WebSocket (a `hello` first, then `events_api` / `interactive` envelopes; the client's
`{"envelope_id"}` acknowledgements are recorded). Slack retries an envelope that is not acknowledged
(`retry_attempt` counting up, `retry_reason`), to whichever connection the app has open, and holds it
while none is: here an envelope sent while no socket is open waits for the next one, and each new
connection is sent every envelope still unacknowledged as a retry; chat.postMessage and chat.update
(text, blocks, thread_ts), with 429 + Retry-After when told to limit; conversations.history (newest
first) and conversations.replies (the parent, then its replies oldest first), each after `oldest`
(exclusive) and up to `limit`, of every message the channel had (users' and the bot's). Errors use the
API's `{"ok": false, "error"}`.

Files a user shares (https://docs.slack.dev/reference/objects/file-object, the `file_share` message
subtype): the event carries file objects (`id, name, title, mimetype, filetype, size, user, mode,
url_private, url_private_download, permalink`), or, as in Slack Connect channels, only
`{"id", "mode": "file_access", "file_access": "check_file_info"}`; files.info (GET, `file`) answers
`{"ok", "file"}` or `file_not_found`, `missing_scope` without files:read. url_private(_download) is
served only to a request with the bot token as `Authorization: Bearer` and files:read; any other is
redirected (302) to the workspace's sign-in page, as Slack does.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiohttp import WSMsgType, web
from standin_server import StandinServer

BOT_TOKEN = "xoxb-test-bot"
APP_TOKEN = "xapp-test-app"


class SlackStandin(StandinServer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.messages: dict[str, dict[str, Any]] = {}
        """ts -> {"channel", "text", "thread_ts", "blocks", "edits"}"""
        self.acks: list[str] = []
        self.pending: dict[str, dict[str, Any]] = {}
        """envelope id -> an envelope sent (or waiting to be) and not acknowledged yet"""
        self._lost_acks = 0
        self.on_ack: Callable[[str], None] = lambda envelope_id: None
        self._limited_updates = 0
        self.history: dict[str, list[dict[str, Any]]] = {}
        """channel -> its messages as conversations.history gives them, oldest first"""
        self._last_ts = 0.0
        self._sockets: list[web.WebSocketResponse] = []
        self.files: dict[str, dict[str, Any]] = {}
        """file id -> its file object, with its bytes under "data" (not sent)"""
        self.downloads: list[str] = []
        """file ids whose bytes were served"""
        self.files_read = True
        """The bot token has the files:read scope."""
        super().__init__("slack-standin")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/"

    # -- the test's side -------------------------------------------------------------------

    def user_says(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U1",
        thread_ts: str | None = None,
        live: bool = True,
        at: float | None = None,
        file: tuple[str, bytes] | None = None,
        check_file_info: bool = False,
    ) -> dict[str, Any]:
        """A user's message, in the channel's history and (`live`) sent as an events_api envelope, which
        is returned; `live=False`: past Slack's retries (the event itself, then). `file`: shared with
        it (`check_file_info`: the event names only the file's id)."""
        event = {
            "type": "message", "channel": channel, "user": user, "text": text, "ts": self._new_ts(at),
            "channel_type": "im" if channel.startswith("D") else "channel",
        }  # fmt: skip
        if thread_ts:
            event["thread_ts"] = thread_ts
        if file is not None:
            shared = self.add_file(*file, user=user)
            if check_file_info:
                shared = {"id": shared["id"], "mode": "file_access", "file_access": "check_file_info"}
            event |= {"subtype": "file_share", "upload": False, "display_as_bot": False, "files": [shared]}
        self._record(channel, event)
        if not live:
            return event
        return self.send_envelope("events_api", {"type": "event_callback", "event": event})

    def send_envelope(
        self, kind: str, payload: dict[str, Any], envelope_id: str | None = None
    ) -> dict[str, Any]:
        """Send an envelope to the open connection, or hold it until one opens."""
        envelope = {
            "envelope_id": envelope_id or uuid.uuid4().hex, "type": kind, "payload": payload,
            "accepts_response_payload": False, "retry_attempt": 0 if envelope_id is None else 1,
        }  # fmt: skip
        with self._changed:
            self.pending[envelope["envelope_id"]] = envelope
        self._run(self._offer(envelope))
        return envelope

    def add_file(self, name: str, data: bytes, *, user: str = "U1") -> dict[str, Any]:
        """A file uploaded to the workspace; its file object as an event carries it."""
        with self._changed:
            file_id = f"F{len(self.files) + 1:08d}"
            base = f"http://127.0.0.1:{self.port}/files-pri/T1-{file_id}"
            kind = name.rsplit(".", 1)[-1] if "." in name else "binary"
            self.files[file_id] = {
                "id": file_id, "created": int(time.time()), "timestamp": int(time.time()), "name": name,
                "title": name, "mimetype": "application/octet-stream", "filetype": kind,
                "pretty_type": kind.upper(), "user": user, "mode": "hosted", "editable": False,
                "is_external": False, "external_type": "", "size": len(data),
                "url_private": f"{base}/{name}", "url_private_download": f"{base}/download/{name}",
                "permalink": f"http://127.0.0.1:{self.port}/files/{user}/{file_id}/{name}", "data": data,
            }  # fmt: skip
            return {k: v for k, v in self.files[file_id].items() if k != "data"}

    def lose_acks(self, count: int) -> None:
        """The next `count` acknowledgements never reach Slack (the app died as it sent them)."""
        with self._changed:
            self._lost_acks = count

    def connected(self) -> bool:
        with self._changed:
            return bool(self._sockets)

    def limit_updates(self, count: int) -> None:
        with self._changed:
            self._limited_updates = count

    def called(self, method: str) -> list[dict[str, Any]]:
        with self._changed:
            return [params for name, params in self.calls if name == method]

    def texts(self, channel: str) -> list[str]:
        with self._changed:
            return [m["text"] for _, m in sorted(self.messages.items()) if m["channel"] == channel]

    # -- the server ------------------------------------------------------------------------

    def _new_ts(self, at: float | None = None) -> str:
        """A message's ts: its time in seconds with six decimals, unique (now: above every ts so far)."""
        with self._changed:
            if at is not None:
                return f"{at:.6f}"
            self._last_ts = max(round(time.time(), 6), round(self._last_ts + 0.000001, 6))
            return f"{self._last_ts:.6f}"

    def _record(self, channel: str, message: dict[str, Any]) -> None:
        entry = {k: v for k, v in message.items() if k not in ("channel", "channel_type")}
        with self._changed:
            self.history.setdefault(channel, []).append(entry)
            self.history[channel].sort(key=lambda m: float(m["ts"]))
            self._changed.notify_all()

    def _read(self, method: str, params: dict[str, Any]) -> web.Response:
        try:
            oldest, limit = float(params.get("oldest", 0)), int(params.get("limit", 100))
        except ValueError:
            return web.json_response({"ok": False, "error": "invalid_arguments"})
        with self._changed:
            found = [dict(m) for m in self.history.get(str(params.get("channel")), [])]
        if method == "conversations.replies":
            parent = [m for m in found if m["ts"] == params.get("ts")]
            if not parent:
                return web.json_response({"ok": False, "error": "thread_not_found"})
            replies = [m for m in found if m.get("thread_ts") == params["ts"] and m["ts"] != params["ts"]]
            messages = parent + [m for m in replies if float(m["ts"]) > oldest][: max(limit - 1, 0)]
        else:
            parents = [m for m in found if m.get("thread_ts", m["ts"]) == m["ts"]]  # no replies here
            messages = [m for m in parents if float(m["ts"]) > oldest][::-1][:limit]
        page = {"ok": True, "messages": messages, "has_more": False, "response_metadata": {"next_cursor": ""}}
        return web.json_response(page)

    def _progress(self) -> object:
        return [name for name, _ in self.calls]

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/link", self._link)
        app.router.add_get("/files-pri/{team_file}/{rest:.*}", self._file)
        app.router.add_get("/signin", self._sign_in)
        app.router.add_route("*", "/api/{method}", self._api)  # slack_sdk GETs a few read methods
        return app

    async def _stop(self) -> None:
        for socket in list(self._sockets):
            await socket.close()
        await super()._stop()

    async def _offer(self, envelope: dict[str, Any]) -> None:
        """Send it unless no socket is open or a new connection's retries already sent it (both run on
        this loop, so checking and marking it sent cannot interleave)."""
        if self._sockets and not envelope.get("sent"):
            envelope["sent"] = True
            await self._send(self._sockets[-1], envelope)

    async def _send(self, socket: web.WebSocketResponse, envelope: dict[str, Any]) -> None:
        """Send on `socket`; one that is closing (a killed app's, before its close is read) loses it, as
        Slack's would: the envelope stays pending and the next connection gets it as a retry."""
        with self._changed:
            wire = {k: v for k, v in envelope.items() if k != "sent"}
        with contextlib.suppress(ConnectionResetError):
            await socket.send_str(json.dumps(wire))

    async def _link(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        await socket.send_str(
            json.dumps({"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A1"}})
        )
        with self._changed:
            self._sockets.append(socket)
            retries = list(self.pending.values())
            for envelope in retries:
                if envelope.get("sent"):
                    envelope["retry_attempt"] += 1
                    envelope["retry_reason"] = "timeout"
                envelope["sent"] = True
            self._changed.notify_all()
        for envelope in retries:
            await self._send(socket, envelope)
        try:
            async for frame in socket:
                if frame.type == WSMsgType.TEXT:
                    envelope_id = json.loads(frame.data).get("envelope_id")
                    with self._changed:
                        lost, self._lost_acks = self._lost_acks > 0, max(0, self._lost_acks - 1)
                    if envelope_id and not lost:
                        self.on_ack(envelope_id)
                        with self._changed:
                            self.acks.append(envelope_id)
                            self.pending.pop(envelope_id, None)
                            self._changed.notify_all()
        finally:
            with self._changed:
                self._sockets.remove(socket)
        return socket

    async def _sign_in(self, request: web.Request) -> web.Response:
        page = "<html><body>Sign in to your workspace</body></html>"
        return web.Response(text=page, content_type="text/html")

    async def _file(self, request: web.Request) -> web.Response:
        """A file's bytes for the bot's bearer token with files:read; the sign-in page for anyone else."""
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        file_id = request.match_info["team_file"].partition("-")[2]
        with self._changed:
            found, allowed = self.files.get(file_id), token == BOT_TOKEN and self.files_read
            if allowed and found is not None:
                self.downloads.append(file_id)
                self._changed.notify_all()
        if not allowed:
            raise web.HTTPFound(f"/signin?redir={request.path}")
        if found is None:
            raise web.HTTPNotFound()
        return web.Response(body=found["data"], content_type=found["mimetype"])

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        if request.method == "GET":
            params: dict[str, Any] = dict(request.query)
        elif request.content_type == "application/json":
            params = await request.json()
        else:
            params = dict(await request.post())
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        with self._changed:
            self.calls.append((method, params))
            self._changed.notify_all()
        wanted = APP_TOKEN if method == "apps.connections.open" else BOT_TOKEN
        if token != wanted:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if method == "auth.test":
            return web.json_response({"ok": True, "user_id": "UBOT", "team_id": "T1", "bot_id": "B1"})
        if method == "apps.connections.open":
            return web.json_response({"ok": True, "url": f"ws://127.0.0.1:{self.port}/link"})
        if method in ("conversations.history", "conversations.replies"):
            return self._read(method, params)
        if method == "files.info":
            if not self.files_read:
                return web.json_response(
                    {"ok": False, "error": "missing_scope", "needed": "files:read", "provided": "chat:write"}
                )
            with self._changed:
                found = self.files.get(str(params.get("file")))
            if found is None:
                return web.json_response({"ok": False, "error": "file_not_found"})
            shown = {k: v for k, v in found.items() if k != "data"}
            return web.json_response({"ok": True, "file": shown, "comments": [], "response_metadata": {}})
        if method == "chat.postMessage":
            ts = self._new_ts()
            bot = {
                "type": "message",
                "user": "UBOT",
                "bot_id": "B1",
                "text": params.get("text", ""),
                "ts": ts,
            }
            self._record(
                params["channel"],
                bot | ({"thread_ts": params["thread_ts"]} if params.get("thread_ts") else {}),
            )
            with self._changed:
                self.messages[ts] = {
                    "channel": params["channel"],
                    "text": params.get("text", ""),
                    "thread_ts": params.get("thread_ts"),
                    "blocks": params.get("blocks"),
                    "edits": 0,
                }
                self._changed.notify_all()
            return web.json_response({"ok": True, "channel": params["channel"], "ts": ts})
        if method == "chat.update":
            with self._changed:
                if self._limited_updates:
                    self._limited_updates -= 1
                    return web.json_response(
                        {"ok": False, "error": "ratelimited"}, status=429, headers={"Retry-After": "1"}
                    )
                found = self.messages.get(params.get("ts", ""))
                if found is None:
                    return web.json_response({"ok": False, "error": "message_not_found"})
                found.update(text=params.get("text", ""), blocks=params.get("blocks"))
                found["edits"] += 1
                self._changed.notify_all()
            return web.json_response({"ok": True, "channel": params["channel"], "ts": params["ts"]})
        return web.json_response({"ok": False, "error": "unknown_method"}, status=404)
