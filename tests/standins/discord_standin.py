"""A local stand-in of Discord's REST API and gateway WebSocket (https://discord.com/developers/docs), for
discord.py to talk to (its `Route.BASE`, and the URL its GET /gateway/bot returns). It records what it
was sent.

Implemented: GET /users/@me, GET /oauth2/applications/@me, GET /gateway/bot; POST
/channels/{id}/messages (JSON, or multipart with
payload_json and files[n]), PATCH /channels/{id}/messages/{id}, POST /channels/{id}/typing, GET
/channels/{id}/messages (the channel's history: `limit` 1-100, default 50, and one of `before`, `after`,
`around`; newest first, as the reference's "Get Channel Messages" answers); message ids are snowflakes
(milliseconds since the Discord epoch, shifted left 22 bits) so a time bound works on them; the gateway
(v10, JSON, zlib-stream as discord.py asks): HELLO, IDENTIFY -> READY, HEARTBEAT -> HEARTBEAT_ACK,
RESUME -> RESUMED, and MESSAGE_CREATE dispatches with sequence numbers. A 429 with retry_after (JSON
body and Retry-After header, as the reference gives) when told to limit edits.

Message components ("Components" in the reference): a message's `components` (action rows of buttons)
are kept as sent and replaced by an edit that sends them (`[]` removes them). A test presses a button as
a user: an INTERACTION_CREATE dispatch of a MESSAGE_COMPONENT interaction (type 3), only for a custom_id
the message shows. Its answer ("Interaction Response": POST /interactions/{id}/{token}/callback, no bot
token, the interaction's token in the path) is taken once, within 3 seconds, of the types a component
interaction allows: 4 CHANNEL_MESSAGE_WITH_SOURCE (flags 64: ephemeral, seen by the presser only, so not
in the channel), 6 DEFERRED_UPDATE_MESSAGE, 7 UPDATE_MESSAGE (edits the message); a late or second
answer is refused as Discord does (10062 Unknown interaction; 40060 already acknowledged).
"""

from __future__ import annotations

import datetime
import itertools
import json
import time
import zlib
from typing import Any

from aiohttp import WSMsgType, web
from standin_server import StandinServer

TOKEN = "discord-test-token"
ANSWER_WITHIN = 3.0
"""Seconds an interaction's token takes its initial response for, per the reference."""
DISCORD_EPOCH_MS = 1_420_070_400_000
BOT = {
    "id": "900",
    "username": "hermetic",
    "discriminator": "0",
    "avatar": None,
    "global_name": None,
    "bot": True,
}


class DiscordStandin(StandinServer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.messages: dict[str, dict[str, Any]] = {}
        """message id -> {"channel", "content", "edits", "file"}"""
        self.history: dict[str, list[dict[str, Any]]] = {}
        """channel id -> every message in it (users' and the bot's), as the API gives them, oldest first"""
        self._last_id = 0
        self._seq = itertools.count(2)
        self._limited_edits = 0
        self._sockets: list[tuple[web.WebSocketResponse, Any]] = []
        self.interactions: dict[str, dict[str, Any]] = {}
        """interaction id -> {"token", "message", "at", "answers": [callback bodies, accepted or not]}"""
        super().__init__("discord-standin")

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    # -- the test's side -------------------------------------------------------------------

    def user_says(
        self,
        channel: str,
        text: str,
        *,
        user: str = "501",
        guild: str | None = None,
        live: bool = True,
        at: datetime.datetime | None = None,
    ) -> dict[str, Any]:
        """A user's message, in the channel's history and (`live`: once a gateway connection is ready)
        dispatched as MESSAGE_CREATE; `live=False` is a message sent while no bot was connected."""
        author = {"id": user, "username": f"user{user}", "discriminator": "0", "avatar": None,
                  "global_name": None}  # fmt: skip
        message = self._record(channel, text, author, at)
        if guild is not None:
            message["guild_id"] = guild
        if live:
            self.wait_for(lambda: self._sockets)
            self._run(self._dispatch("MESSAGE_CREATE", message))
        return message

    def bot_posted(self, channel: str, text: str, components: list[dict[str, Any]]) -> str:
        """A message of the bot's with components, as an earlier run of it would have left; its id."""
        sent = self._message(channel, None, {"content": text, "components": components}, None)
        return str(json.loads(sent.text)["id"])

    def press(self, message_id: str, custom_id: str, *, user: str = "501", guild: str | None = None) -> str:
        """`user` presses the button `custom_id` of the bot's message: INTERACTION_CREATE (type 3,
        MESSAGE_COMPONENT) dispatched; the interaction's id."""
        with self._changed:
            message = next(m for found in self.history.values() for m in found if m["id"] == message_id)
            shown = [c.get("custom_id") for row in message["components"] for c in row["components"]]
            assert custom_id in shown, f"Discord sends only a press of a button the message shows: {shown}"
            message = json.loads(json.dumps(message))
        interaction_id = self._snowflake(None)
        person = {"id": user, "username": f"user{user}", "discriminator": "0", "avatar": None,
                  "global_name": None}  # fmt: skip
        channel_id = message["channel_id"]
        token = f"interaction-token-{interaction_id}"
        interaction: dict[str, Any] = {
            "id": interaction_id, "application_id": BOT["id"], "type": 3, "token": token, "version": 1,
            "data": {"custom_id": custom_id, "component_type": 2}, "channel_id": channel_id,
            "message": message, "app_permissions": "0", "locale": "en-US", "entitlements": [],
            "authorizing_integration_owners": {"0": guild} if guild else {"1": user},
            "context": 0 if guild else 1, "attachment_size_limit": 10485760,
        }  # fmt: skip
        if guild is None:
            interaction["user"] = person
            interaction["channel"] = {"id": channel_id, "type": 1, "flags": 0, "recipients": [person],
                                      "last_message_id": message_id}  # fmt: skip
        else:
            interaction |= {
                "guild_id": guild, "guild_locale": "en-US",
                "guild": {"id": guild, "locale": "en-US", "features": []},
                "member": {"user": person, "roles": [], "joined_at": message["timestamp"], "deaf": False,
                           "mute": False, "flags": 0, "pending": False, "permissions": "0", "nick": None,
                           "avatar": None},
                "channel": {"id": channel_id, "type": 0, "guild_id": guild, "name": f"channel-{channel_id}",
                            "position": 0, "permission_overwrites": [], "nsfw": False, "parent_id": None,
                            "topic": None, "rate_limit_per_user": 0, "flags": 0, "permissions": "0",
                            "last_message_id": message_id},
            }  # fmt: skip
        with self._changed:
            self.interactions[interaction_id] = {
                "token": token,
                "message": message_id,
                "at": time.monotonic(),
                "answers": [],
            }
        self.wait_for(lambda: self._sockets)
        self._run(self._dispatch("INTERACTION_CREATE", interaction))
        return interaction_id

    def answers(self, interaction_id: str) -> list[dict[str, Any]]:
        """The callback bodies posted for an interaction (the first accepted; any later refused)."""
        with self._changed:
            return list(self.interactions[interaction_id]["answers"])

    def components(self, message_id: str) -> list[dict[str, Any]]:
        with self._changed:
            found = [m for ms in self.history.values() for m in ms if m["id"] == message_id]
            return list(found[0]["components"])

    def drop_connections(self) -> None:
        """Close every gateway WebSocket (as Discord does on a reconnect request)."""
        self._run(self._drop())

    def limit_edits(self, count: int) -> None:
        with self._changed:
            self._limited_edits = count

    def called(self, method: str, path_part: str) -> list[dict[str, Any]]:
        with self._changed:
            return [body for verb, path, body in self.calls if verb == method and path_part in path]

    def contents(self, channel: str) -> list[str]:
        with self._changed:
            return [m["content"] for _, m in sorted(self.messages.items()) if m["channel"] == channel]

    # -- the server ------------------------------------------------------------------------

    def _snowflake(self, at: datetime.datetime | None) -> str:
        """A new id: its time part from `at` (now by default), still above every id given so far when
        `at` is now (ids of back-dated messages only need to be unique)."""
        when = int((at.timestamp() if at else time.time()) * 1000) - DISCORD_EPOCH_MS
        with self._changed:
            found = when << 22
            if at is None:
                found = self._last_id = max(found, self._last_id + 1)
            else:
                found |= next(_BACKDATED) % 4096
            return str(found)

    def _record(
        self, channel: str, text: str, author: dict[str, Any], at: datetime.datetime | None = None
    ) -> dict[str, Any]:
        message = {
            "id": self._snowflake(at), "channel_id": channel, "content": text, "type": 0, "flags": 0,
            "author": author, "timestamp": (at or datetime.datetime.now(datetime.UTC)).isoformat(),
            "edited_timestamp": None, "tts": False, "mention_everyone": False, "mentions": [],
            "mention_roles": [], "attachments": [], "embeds": [], "pinned": False, "components": [],
        }  # fmt: skip
        with self._changed:
            found = self.history.setdefault(channel, [])
            found.append(message)
            found.sort(key=lambda m: int(m["id"]))
            self._changed.notify_all()
        return message

    def _read_history(self, channel: str, query: Any) -> web.Response:
        try:
            limit = int(query.get("limit", "50"))
            bounds = {k: int(query[k]) for k in ("before", "after", "around") if k in query}
        except ValueError:
            return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
        if not 1 <= limit <= 100 or len(bounds) > 1:
            return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
        with self._changed:
            found = list(self.history.get(channel, []))
        ids = [int(m["id"]) for m in found]
        if "after" in bounds:  # the `limit` messages just after it
            found = [m for m, i in zip(found, ids, strict=True) if i > bounds["after"]][:limit]
        elif "around" in bounds:
            at = next((n for n, i in enumerate(ids) if i >= bounds["around"]), len(found))
            found = found[max(0, at - limit // 2) : at + (limit + 1) // 2]
        else:  # the `limit` newest before `before` (or newest of all)
            found = [m for m, i in zip(found, ids, strict=True) if i < bounds.get("before", 1 << 64)]
            found = found[-limit:]
        return _json(found[::-1])

    def _progress(self) -> object:
        return [(verb, path) for verb, path, _ in self.calls]

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/gw", self._gateway)
        app.router.add_route("*", "/api/v10/{path:.*}", self._api)
        return app

    async def _stop(self) -> None:
        await self._drop()
        await super()._stop()

    async def _drop(self) -> None:
        for socket, _ in list(self._sockets):
            await socket.close(code=4000)

    async def _send(self, socket: web.WebSocketResponse, compressor: Any, payload: dict[str, Any]) -> None:
        data = compressor.compress(json.dumps(payload).encode()) + compressor.flush(zlib.Z_SYNC_FLUSH)
        await socket.send_bytes(data)

    async def _dispatch(self, event: str, data: dict[str, Any]) -> None:
        socket, compressor = self._sockets[-1]
        await self._send(socket, compressor, {"op": 0, "t": event, "s": next(self._seq), "d": data})

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        if request.query.get("compress") not in (None, "zlib-stream"):
            raise web.HTTPBadRequest(text="this stand-in speaks zlib-stream only")
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        compressor = zlib.compressobj()
        await self._send(
            socket, compressor, {"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None}
        )
        try:
            async for frame in socket:
                if frame.type != WSMsgType.TEXT:
                    continue
                message = json.loads(frame.data)
                with self._changed:
                    self.calls.append(("WS", f"op{message['op']}", message.get("d") or {}))
                    self._changed.notify_all()
                if message["op"] == 1:
                    await self._send(socket, compressor, {"op": 11, "d": None, "s": None, "t": None})
                elif message["op"] in (2, 6):
                    if message["d"].get("token") != TOKEN:
                        await socket.close(code=4004)
                        break
                    ready = {
                        "v": 10, "user": BOT, "guilds": [], "session_id": "session-1",
                        "resume_gateway_url": f"ws://127.0.0.1:{self.port}/gw", "shard": [0, 1],
                        "application": {"id": "900", "flags": 0}, "private_channels": [],
                    }  # fmt: skip
                    kind = ("READY", ready) if message["op"] == 2 else ("RESUMED", {})
                    await self._send(socket, compressor, {"op": 0, "t": kind[0], "s": 1, "d": kind[1]})
                    with self._changed:
                        self._sockets.append((socket, compressor))
                        self._changed.notify_all()
        finally:
            with self._changed:
                self._sockets = [(s, c) for s, c in self._sockets if s is not socket]
        return socket

    async def _api(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        body: dict[str, Any] = {}
        file: bytes | None = None
        if request.content_type == "application/json":
            body = await request.json()
        elif request.content_type.startswith("multipart/"):
            form = await request.post()
            body = json.loads(str(form.get("payload_json", "{}")))
            for value in form.values():
                if isinstance(value, web.FileField):
                    file = value.file.read()
        with self._changed:
            self.calls.append((request.method, path, body))
            self._changed.notify_all()
        parts = path.strip("/").split("/")
        if parts[0] == "interactions" and parts[3:] == ["callback"] and request.method == "POST":
            return self._callback(parts[1], parts[2], body, request.query)
        if request.headers.get("Authorization") != f"Bot {TOKEN}":
            return _json({"message": "401: Unauthorized", "code": 0}, status=401)
        if path == "/users/@me":
            return _json(BOT)
        if path == "/oauth2/applications/@me":
            owner = {
                "id": "1",
                "username": "owner",
                "discriminator": "0",
                "avatar": None,
                "global_name": None,
            }
            app = {
                "id": "900", "name": "hermetic", "description": "", "icon": None, "bot_public": False,
                "bot_require_code_grant": False, "owner": owner, "verify_key": "00", "flags": 0,
            }  # fmt: skip
            return _json(app)
        if path == "/gateway/bot":
            limit = {"total": 1000, "remaining": 999, "reset_after": 0, "max_concurrency": 1}
            return _json({"url": f"ws://127.0.0.1:{self.port}/gw", "shards": 1, "session_start_limit": limit})
        if parts[0] == "channels" and parts[-1] == "typing":
            return web.Response(status=204)
        if parts[0] == "channels" and parts[-1] == "messages" and request.method == "POST":
            return self._message(parts[1], None, body, file)
        if parts[0] == "channels" and parts[-1] == "messages" and request.method == "GET":
            return self._read_history(parts[1], request.query)
        if parts[0] == "channels" and len(parts) == 4 and request.method == "PATCH":
            with self._changed:
                if self._limited_edits:
                    self._limited_edits -= 1
                    limited = {"message": "You are being rate limited.", "retry_after": 0.5, "global": False}
                    return _json(limited, status=429, headers={"Retry-After": "0.5", "Via": "1.1 google"})
            return self._edit(parts[1], parts[3], body)
        return _json({"message": "404: Not Found", "code": 0}, status=404)

    def _edit(self, channel: str, message_id: str, body: dict[str, Any]) -> web.Response:
        with self._changed:
            found = self.messages.get(message_id)
            if found is None:
                return _json({"message": "Unknown Message", "code": 10008}, status=404)
            found["content"] = body.get("content", found["content"])
            found["edits"] += 1
            self._changed.notify_all()
        return self._message(channel, message_id, body | {"content": found["content"]}, None)

    def _message(
        self, channel: str, message_id: str | None, body: dict[str, Any], file: bytes | None
    ) -> web.Response:
        """A new message of the bot's (`message_id` None), or the one edited."""
        content = body.get("content") or ""
        if len(content) > 2000:
            return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
        if message_id is None:
            sent = self._record(channel, content, BOT)
            with self._changed:
                sent["components"] = body.get("components") or []
                self.messages[sent["id"]] = {"channel": channel, "content": content, "edits": 0, "file": file}
                self._changed.notify_all()
            return _json(sent)
        with self._changed:
            edited = next(m for m in self.history[channel] if m["id"] == message_id)
            edited["content"] = content
            edited["components"] = body.get("components", edited["components"])
            edited["edited_timestamp"] = datetime.datetime.now(datetime.UTC).isoformat()
            self._changed.notify_all()  # a wait on the history's content (components) wakes too
            return _json(dict(edited))

    def _callback(self, interaction_id: str, token: str, body: dict[str, Any], query: Any) -> web.Response:
        """An interaction's initial response: once, within ANSWER_WITHIN seconds."""
        with self._changed:
            found = self.interactions.get(interaction_id)
            if found is None or found["token"] != token:
                return _json({"message": "Unknown interaction", "code": 10062}, status=404)
            found["answers"].append(body)
            self._changed.notify_all()
            if time.monotonic() - found["at"] > ANSWER_WITHIN:
                return _json({"message": "Unknown interaction", "code": 10062}, status=404)
            if len(found["answers"]) > 1:
                return _json({"message": "Interaction has already been acknowledged.", "code": 40060}, 400)
            kind, data = body.get("type"), body.get("data") or {}
            if kind not in (4, 6, 7):
                return _json({"message": "Invalid Form Body", "code": 50035}, status=400)
            message = next(m for ms in self.history.values() for m in ms if m["id"] == found["message"])
        ephemeral = kind == 4 and bool(int(data.get("flags") or 0) & 64)
        resource: dict[str, Any] | None = None
        if kind == 7:  # the pressed message edited, like a PATCH of it
            resource = json.loads(self._edit(message["channel_id"], message["id"], data).text)
        elif kind == 4 and not ephemeral:
            resource = json.loads(self._message(message["channel_id"], None, data, None).text)
        elif kind == 4:  # only the presser sees it: not in the channel
            resource = dict(message, id=self._snowflake(None), content=data.get("content", ""), flags=64,
                            components=[])  # fmt: skip
        if query.get("with_response") not in ("1", "true", "True"):
            return web.Response(status=204)
        callback: dict[str, Any] = {"interaction": {
            "id": interaction_id, "type": 3, "response_message_loading": False,
            "response_message_ephemeral": ephemeral,
        }}  # fmt: skip
        if resource is not None:
            callback["interaction"]["response_message_id"] = resource["id"]
            callback["resource"] = {"type": kind, "message": resource}
        return _json(callback)


_BACKDATED = itertools.count(1)


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """JSON as Discord sends it: exactly `application/json` (discord.py parses only that)."""
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
