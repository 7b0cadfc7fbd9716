"""A local stand-in of a Mattermost server's API v4 (https://api.mattermost.com/), for mattermostdriver
to talk to through its url/port/scheme options. It records what it was sent.

Implemented: GET /users/me (Bearer token, 401 otherwise); GET /channels/{id} (`type` D for a direct
channel, O otherwise); the WebSocket /websocket (the client's `authentication_challenge` answered with
`{"status": "OK", "seq_reply"}`, then the `hello` event, then `posted` events with `data.post` as a
JSON string, `channel_type`, `sender_name`); POST /posts (channel_id, message, root_id, file_ids, props
with attachments and their actions); PUT /posts/{id}/patch (message, props), with 429 +
X-Ratelimit-Reset when told to limit; GET /posts/{id}; GET /channels/{id}/posts?since= (posts created
or changed after `since` ms, as `{"order", "posts"}`); POST /files (multipart channel_id + files,
answering `file_infos`) and GET /files/{id}. A press of a button is what the server does on one: a POST
of `{user_id, user_name, channel_id, post_id, trigger_id, context}` to the action's integration URL.
A custom slash command is what the server does on one (api.mattermost.com, "Slash commands"; the server's
DoCommandRequest): a form-encoded POST of `{token, team_id, team_domain, channel_id, channel_name,
user_id, user_name, command, text, trigger_id, response_url}` with `Authorization: Token <token>` to the
command's URL. Errors are the API's `{"id", "message", "status_code"}`. Direct channels (d...) are named
`<user>__botuser`, as the server names a direct channel after its two members, except dx... ones,
between two people (`u1__u2`).
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from aiohttp import WSMsgType, web
from standin_server import StandinServer

TOKEN = "mm-test-token"
BOT = {"id": "botuser", "username": "hermetic"}


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON as the server sends it: `Content-Type: application/json` with no charset parameter
    (mattermostdriver compares the header exactly)."""
    headers = {"Content-Type": "application/json"} | (headers or {})
    return web.Response(body=json.dumps(body).encode(), status=status, headers=headers)


class MattermostStandin(StandinServer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.posts: dict[str, dict[str, Any]] = {}
        """post id -> the post (users' and the bot's), with "edits" counted for the bot's"""
        self.files: dict[str, tuple[str, bytes]] = {}
        self._limited_patches = 0
        self._last_ms = 0
        self._sockets: list[web.WebSocketResponse] = []
        super().__init__("mattermost-standin")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- the test's side -------------------------------------------------------------------

    def user_says(
        self, channel: str, text: str, *, user: str = "u1", root_id: str = "", live: bool = True,
        file: tuple[str, bytes] | None = None, at: float | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """A user's post, kept in the channel and (`live`) sent as a `posted` event to open sockets.
        Channels named d... are direct ones."""
        post = self._new_post(channel, text, user, root_id, at)
        if file is not None:
            file_id = uuid.uuid4().hex
            with self._changed:
                self.files[file_id] = file
            post["file_ids"] = [file_id]
            post["metadata"] = {"files": [{"id": file_id, "name": file[0], "size": len(file[1])}]}
        if live:
            self._run(self._broadcast(post))
        return post

    def press(self, post_id: str, label: str, user: str = "u1") -> int:
        """Press the button `label` of a post, as the server does: POST to its integration URL."""
        with self._changed:
            post = self.posts[post_id]
        actions = [a for att in (post["props"].get("attachments") or []) for a in att.get("actions") or []]
        (action,) = [a for a in actions if a["name"] == label]
        body = {
            "user_id": user, "user_name": user, "channel_id": post["channel_id"], "post_id": post_id,
            "trigger_id": uuid.uuid4().hex, "type": "", "context": action["integration"]["context"],
        }  # fmt: skip
        request = urllib.request.Request(
            action["integration"]["url"], json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (loopback)
            return int(response.status)

    def slash(
        self, url: str, token: str, channel: str, command: str, text: str = "", user: str = "u1"
    ) -> tuple[int, Any]:
        """Run the custom slash command `command` (`/new`, `/hermetic`) in `channel` as `user`, as the
        server does: its request POSTed to `url`; the status and JSON it was answered with."""
        form = {
            "token": token, "team_id": "team1", "team_domain": "test", "channel_id": channel,
            "channel_name": self._channel(channel)["name"], "user_id": user, "user_name": user,
            "command": command, "text": text, "trigger_id": uuid.uuid4().hex,
            "response_url": f"{self.url}/hooks/commands/{uuid.uuid4().hex[:26]}",
        }  # fmt: skip
        headers = {"Authorization": f"Token {token}", "Accept": "application/json",
                   "Content-Type": "application/x-www-form-urlencoded"}  # fmt: skip
        request = urllib.request.Request(url, urllib.parse.urlencode(form).encode(), headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (loopback)
                return int(response.status), json.loads(response.read() or b"null")
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read() or b"null")

    @staticmethod
    def _channel(channel: str) -> dict[str, Any]:
        if channel.startswith("dx"):
            return {"id": channel, "type": "D", "name": "u1__u2"}
        if channel.startswith("d"):
            return {"id": channel, "type": "D", "name": f"{channel}user__{BOT['id']}"}
        return {"id": channel, "type": "O", "name": channel}

    def connected(self) -> bool:
        with self._changed:
            return bool(self._sockets)

    def limit_patches(self, count: int) -> None:
        with self._changed:
            self._limited_patches = count

    def called(self, method: str, path: str) -> list[dict[str, Any]]:
        with self._changed:
            return [body for m, p, body in self.calls if m == method and p.startswith(path)]

    def bot_posts(self, channel: str) -> list[dict[str, Any]]:
        with self._changed:
            found = [
                p for p in self.posts.values() if p["channel_id"] == channel and p["user_id"] == BOT["id"]
            ]
            return sorted(found, key=lambda p: p["create_at"])

    def texts(self, channel: str) -> list[str]:
        return [p["message"] for p in self.bot_posts(channel)]

    # -- the server ------------------------------------------------------------------------

    def _new_post(
        self, channel: str, text: str, user: str, root_id: str, at: float | None = None,
        props: dict[str, Any] | None = None, file_ids: list[str] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        with self._changed:
            now = int((at if at is not None else time.time()) * 1000)
            if at is None:
                now = self._last_ms = max(now, self._last_ms + 1)
            post = {
                "id": uuid.uuid4().hex[:26], "create_at": now, "update_at": now, "delete_at": 0,
                "user_id": user, "channel_id": channel, "root_id": root_id, "message": text, "type": "",
                "props": props or {}, "file_ids": file_ids or [], "edits": 0,
            }  # fmt: skip
            self.posts[post["id"]] = post
            self._changed.notify_all()
            return post

    def _progress(self) -> object:
        return [(m, p) for m, p, _ in self.calls]

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v4/websocket", self._websocket)
        app.router.add_route("*", "/api/v4/{path:.*}", self._api)
        return app

    async def _stop(self) -> None:
        for socket in list(self._sockets):
            await socket.close()
        await super()._stop()

    async def _broadcast(self, post: dict[str, Any]) -> None:
        wire = {k: v for k, v in post.items() if k != "edits"}
        event = {
            "event": "posted", "seq": 1,
            "data": {
                "post": json.dumps(wire), "sender_name": "@" + post["user_id"],
                "channel_type": "D" if post["channel_id"].startswith("d") else "O",
            },
            "broadcast": {"channel_id": post["channel_id"]},
        }  # fmt: skip
        for socket in list(self._sockets):
            with contextlib.suppress(ConnectionResetError):  # a killed client's, before its close is read
                await socket.send_str(json.dumps(event))

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        first = await socket.receive()
        challenge = json.loads(first.data) if first.type == WSMsgType.TEXT else {}
        if (
            challenge.get("action") != "authentication_challenge"
            or challenge.get("data", {}).get("token") != TOKEN
        ):
            await socket.close(code=4001)
            return socket
        await socket.send_str(json.dumps({"status": "OK", "seq_reply": challenge.get("seq")}))
        await socket.send_str(json.dumps({"event": "hello", "data": {"server_version": "10.0.0"}, "seq": 0}))
        with self._changed:
            self._sockets.append(socket)
            self._changed.notify_all()
        try:
            async for _ in socket:
                pass
        finally:
            with self._changed:
                self._sockets.remove(socket)
        return socket

    def _error(self, status: int, message: str) -> web.Response:
        return _json({"id": "api.error", "message": message, "status_code": status}, status=status)

    async def _api(self, request: web.Request) -> web.StreamResponse:
        path, method = "/" + request.match_info["path"], request.method
        if request.content_type == "application/json":
            body: dict[str, Any] = await request.json()
        elif request.content_type == "multipart/form-data":
            form = await request.post()
            upload = form["files"]
            body = {"channel_id": form.get("channel_id"), "files": (upload.filename, upload.file.read())}  # type: ignore[union-attr]
        else:
            body = dict(request.query)
        with self._changed:
            self.calls.append((method, path, body))
            self._changed.notify_all()
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._error(401, "Invalid or expired session, please login again.")
        parts = path.strip("/").split("/")
        if path == "/users/me":
            return _json(BOT)
        if method == "GET" and parts[0] == "channels" and len(parts) == 2:
            return _json(self._channel(parts[1]))
        if method == "GET" and parts[0] == "channels" and parts[2:] == ["posts"]:
            since = int(request.query.get("since", "0"))
            with self._changed:
                found = [
                    {k: v for k, v in p.items() if k != "edits"} for p in self.posts.values()
                    if p["channel_id"] == parts[1] and max(p["create_at"], p["update_at"]) > since
                ]  # fmt: skip
            found.sort(key=lambda p: -p["create_at"])
            return _json({"order": [p["id"] for p in found], "posts": {p["id"]: p for p in found}})
        if method == "POST" and path == "/posts":
            # the post is recorded whole, with its buttons, under one notify: a wait_for woken by a post
            # without its props would sleep out its timeout (no later call arrives while a press is awaited)
            post = self._new_post(
                body["channel_id"], body.get("message", ""), BOT["id"], body.get("root_id", ""),
                props={**(body.get("props") or {}), "from_bot": "true"}, file_ids=body.get("file_ids") or [],
            )  # fmt: skip
            return _json(post, status=201)
        if parts[0] == "posts" and len(parts) >= 2:
            with self._changed:
                post = self.posts.get(parts[1])
                if post is None:
                    return self._error(404, "Unable to find the existing post.")
                if method == "PUT" and parts[2:] == ["patch"]:
                    if self._limited_patches:
                        self._limited_patches -= 1
                        return _json(
                            {"message": "Too many requests"}, status=429, headers={"X-Ratelimit-Reset": "1"}
                        )
                    post.update(
                        message=body.get("message", post["message"]), update_at=int(time.time() * 1000)
                    )
                    if "props" in body:
                        post["props"] = {**body["props"], "from_bot": "true"}
                    post["edits"] += 1
                    self._changed.notify_all()
                return _json(post)
        if method == "POST" and path == "/files":
            file_id = uuid.uuid4().hex
            with self._changed:
                self.files[file_id] = body["files"]
            return _json({"file_infos": [{"id": file_id, "name": body["files"][0]}]}, status=201)
        if method == "GET" and parts[0] == "files" and len(parts) == 2 and parts[1] in self.files:
            return web.Response(body=self.files[parts[1]][1], content_type="application/octet-stream")
        return self._error(404, f"no route {method} {path}")
