"""A local stand-in of Feishu / Lark's open platform for a self-built app, from the published references
(https://open.feishu.cn/document/server-docs/event-subscription-guide/event-subscription-configure-/
request-url-configuration-case, the im/v1 message, image, file and message-resource references, the
card callback reference, and the long-connection protocol the official SDKs speak), for the official
lark-oapi SDK's ws.Client and the adapter's httpx client to talk to. It records what it was sent.

The long connection: POST /callback/ws/endpoint `{AppID, AppSecret}` answers `{code: 0, data: {URL,
ClientConfig: {ReconnectCount, ReconnectInterval, ReconnectNonce, PingInterval}}}`; the WebSocket at URL
(`?device_id=&service_id=&ticket=`, each ticket once) carries protobuf frames (pbbp2.Frame: SeqID 1,
LogID 2, service 3, method 4 (0 control, 1 data), headers 5 (key 1, value 2), payload_encoding 6,
payload_type 7, payload 8, LogIDNew 9), encoded here by hand. A data frame's headers say `type: event`,
`message_id`, `trace_id`, `sum`, `seq`; its payload is the event's JSON (schema 2.0). The client answers
with the same frame, its payload `{"code": 200, "data": base64 of the handler's result}`. A client's ping
(control, `type: ping`) is answered by a pong carrying the ClientConfig. An event not answered with
code 200 (the client's handler raised) is pushed again when the test says (`redeliver`) or when a
client connects anew, as Feishu re-pushes an event whose push failed; Feishu's events carry `event_id`.

The REST API, under /open-apis (`Authorization: Bearer` a tenant_access_token, else code 99991663):
POST auth/v3/tenant_access_token/internal `{app_id, app_secret}` -> `{code, tenant_access_token,
expire}` (10014 app secret invalid); GET bot/v3/info -> `{bot: {open_id, app_name}}`; POST
im/v1/messages?receive_id_type=chat_id|open_id `{receive_id, msg_type, content}`, POST
im/v1/messages/{id}/reply `{msg_type, content, reply_in_thread}`, PATCH im/v1/messages/{id}
`{content}` (an interactive card only), each -> `{code: 0, data: {message_id, ...}}`, a card or post
over 30 KB refused with 230025; POST im/v1/images (multipart image_type, image) -> image_key; POST
im/v1/files (multipart file_type, file_name, file) -> file_key; GET
im/v1/messages/{id}/resources/{key}?type=image|file -> the bytes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import uuid
from typing import Any

from aiohttp import WSMsgType, web
from standin_server import StandinServer

APP_ID = "cli_a5test0feishu01"
APP_SECRET = "feishu-test-secret"
BOT_OPEN_ID = "ou_bot0000000000000000000000000001"
TENANT = "tenant0test"
CARD_LIMIT = 30 * 1024
"""Bytes of an interactive card's or a post's request body Feishu takes (a text's is 150 KB)."""


# -- pbbp2.Frame, by hand (proto2: varints and length-delimited fields) -------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        bits, value = value & 0x7F, value >> 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def encode_frame(frame: dict[str, Any]) -> bytes:
    out = b"".join(
        _field(n, frame.get(k, 0)) for n, k in ((1, "SeqID"), (2, "LogID"), (3, "service"), (4, "method"))
    )
    for key, value in frame.get("headers", {}).items():
        out += _field(5, _field(1, key) + _field(2, value))
    return out + _field(8, frame.get("payload", b""))


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    found: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        tag, at = _read_varint(data, at)
        if tag & 7 == 0:
            value, at = _read_varint(data, at)
            found.append((tag >> 3, value))
        elif tag & 7 == 2:
            size, at = _read_varint(data, at)
            found.append((tag >> 3, data[at : at + size]))
            at += size
        else:
            raise ValueError(f"wire type {tag & 7} is not in pbbp2.Frame")
    return found


def decode_frame(data: bytes) -> dict[str, Any]:
    names = {1: "SeqID", 2: "LogID", 3: "service", 4: "method", 6: "payload_encoding", 7: "payload_type",
             8: "payload", 9: "LogIDNew"}  # fmt: skip
    frame: dict[str, Any] = {"headers": {}, "payload": b""}
    for number, value in _fields(data):
        if number == 5 and isinstance(value, bytes):
            header = dict(_fields(value))
            frame["headers"][bytes(header[1]).decode()] = bytes(header[2]).decode()  # type: ignore[arg-type]
        elif number in names:
            frame[names[number]] = value
    return frame


def _answer(code: int, msg: str = "success", status: int = 200, **more: Any) -> web.Response:
    return web.json_response({"code": code, "msg": msg, **more}, status=status)


class FeishuStandin(StandinServer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.messages: dict[str, dict[str, Any]] = {}
        """message_id -> a message the app sent: chat, msg_type, content (parsed), reply_to, patches"""
        self.responses: dict[str, list[dict[str, Any]]] = {}
        """event_id -> the client's answers to the frames that pushed it (data decoded)"""
        self.connections = 0
        self.pings = 0
        self.files: dict[str, tuple[str, bytes]] = {}
        """a file_key / image_key -> (name, bytes): users' files, and what the app uploaded"""
        self.tokens: set[str] = set()
        self.reconnect_interval = 1
        self.hold_cards: threading.Event | None = None
        """Set to an unset event: a card with buttons the app sends is recorded at once, but the answer
        naming its message id waits until the event is set (a press can come before it, as on Feishu)."""
        self._tickets: set[str] = set()
        self._pending: dict[str, bytes] = {}
        """event_id -> the payload of an event not answered with code 200 yet"""
        self._frames: dict[str, str] = {}
        """a data frame's message_id -> the event_id it carries"""
        self._sockets: list[web.WebSocketResponse] = []
        self._user_messages: dict[str, str] = {}
        """a user's message id -> its chat"""
        super().__init__("feishu-standin")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def gateway_config(self, allow_users: list[str], **more: Any) -> dict[str, Any]:
        return {
            "app_id": APP_ID,
            "app_secret": APP_SECRET,
            "domain": self.url,
            "allow_users": allow_users,
        } | more

    # -- the test's side -------------------------------------------------------------------

    def user_says(
        self, user: str, text: str = "", *, group: str | None = None, mention_bot: bool = False,
        message: dict[str, Any] | None = None, message_id: str | None = None, thread: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """An im.message.receive_v1 event from `user` (open id), in `group` (a chat id) or their 1:1 chat;
        `message` overrides message_type and content. The event, as pushed."""
        mentions = []
        if mention_bot:
            text = f"@_user_1 {text}"
            mentions = [{"key": "@_user_1", "name": "Hermetic", "tenant_key": TENANT,
                         "id": {"open_id": BOT_OPEN_ID, "union_id": "on_bot", "user_id": ""}}]  # fmt: skip
        body = {"message_type": "text", "content": json.dumps({"text": text})} | (message or {})
        now = str(int(time.time() * 1000))
        event = {
            "sender": {"sender_id": {"open_id": user, "union_id": f"on_{user}", "user_id": user[-8:]},
                       "sender_type": "user", "tenant_key": TENANT},
            "message": {
                "message_id": message_id or f"om_{uuid.uuid4().hex}", "create_time": now, "update_time": now,
                "chat_id": group or f"oc_p2p_{user}", "chat_type": "group" if group else "p2p",
                "root_id": thread or "", "parent_id": thread or "",
                "thread_id": f"omt_{thread}" if thread else "",
                "mentions": mentions, "user_agent": "Mozilla/5.0 Lark/7.30",
            } | body,
        }  # fmt: skip
        with self._changed:
            self._user_messages[event["message"]["message_id"]] = event["message"]["chat_id"]
            if thread:
                self._user_messages.setdefault(thread, event["message"]["chat_id"])
        return self.push("im.message.receive_v1", event)

    def press(self, message_id: str, user: str, value: dict[str, Any]) -> dict[str, Any]:
        """A press of a card's button (card.action.trigger, the new card callback); the event pushed."""
        chat = self.messages[message_id]["chat"] if message_id in self.messages else "oc_unknown"
        event = {
            "operator": {"tenant_key": TENANT, "open_id": user, "union_id": f"on_{user}",
                         "user_id": user[-8:]},
            "token": f"c-{uuid.uuid4().hex}", "host": "im_message", "delivery_type": "",
            "action": {"value": value, "tag": "button"},
            "context": {"open_message_id": message_id, "open_chat_id": chat},
        }  # fmt: skip
        return self.push("card.action.trigger", event)

    def push(self, event_type: str, event: dict[str, Any]) -> dict[str, Any]:
        """An event on the connection (kept until answered with code 200, pushed again on a new one)."""
        envelope = {
            "schema": "2.0",
            "header": {"event_id": uuid.uuid4().hex, "event_type": event_type, "token": "v-token",
                       "create_time": str(int(time.time() * 1000)), "tenant_key": TENANT, "app_id": APP_ID},
            "event": event,
        }  # fmt: skip
        payload = json.dumps(envelope).encode()
        with self._changed:
            self._pending[envelope["header"]["event_id"]] = payload
        self._run(self._send_event(payload))
        return envelope

    def upload(self, name: str, data: bytes) -> str:
        """A file a user sent: its file_key (or image_key for a name ending in .png)."""
        key = f"{'img_v3' if name.endswith('.png') else 'file_v3'}_{uuid.uuid4().hex}"
        with self._changed:
            self.files[key] = (name, data)
        return key

    def redeliver(self) -> None:
        """Push every event not answered with code 200 again."""
        with self._changed:
            pending = list(self._pending.values())
        for payload in pending:
            self._run(self._send_event(payload))

    def expire_tokens(self) -> None:
        with self._changed:
            self.tokens.clear()

    def drop(self) -> None:
        """Close the open connections (the client reconnects by itself)."""
        self._run(self._close_all())

    def open_connections(self) -> int:
        with self._changed:
            return sum(1 for s in self._sockets if not s.closed)

    def wait_answer(self, event: dict[str, Any]) -> dict[str, Any]:
        """The client's last answer to the frames that pushed `event` (once one came)."""
        return self.wait_for(lambda: self.responses.get(event["header"]["event_id"]))[-1]

    def to(self, chat: str) -> list[dict[str, Any]]:
        """The messages the app sent to `chat`, oldest first."""
        with self._changed:
            return [m for m in self.messages.values() if m["chat"] == chat]

    def texts(self, chat: str) -> list[str]:
        """The markdown of each card sent to `chat`, as it stands now."""
        return [card_markdown(m["content"]) for m in self.to(chat) if m["msg_type"] == "interactive"]

    def called(self, method: str, path: str) -> list[dict[str, Any]]:
        with self._changed:
            return [body for m, p, body in self.calls if m == method and path in p]

    # -- the server ------------------------------------------------------------------------

    def _progress(self) -> object:
        return [(m, p) for m, p, _ in self.calls]

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/callback/ws/endpoint", self._endpoint)
        app.router.add_get("/ws", self._socket)
        app.router.add_route("*", "/open-apis/{path:.*}", self._api)
        return app

    def _config(self) -> dict[str, int]:
        return {"ReconnectCount": -1, "ReconnectInterval": self.reconnect_interval, "ReconnectNonce": 0,
                "PingInterval": 120}  # fmt: skip

    async def _endpoint(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._changed:
            self.calls.append(("POST", "/callback/ws/endpoint", {"AppID": body.get("AppID")}))
            self._changed.notify_all()
        if (body.get("AppID"), body.get("AppSecret")) != (APP_ID, APP_SECRET):
            return _answer(10014, "app secret invalid")
        ticket = uuid.uuid4().hex
        with self._changed:
            self._tickets.add(ticket)
        url = f"ws://127.0.0.1:{self.port}/ws?device_id=d{ticket[:8]}&service_id=7&ticket={ticket}"
        return _answer(0, "ok", data={"URL": url, "ClientConfig": self._config()})

    async def _send_event(self, payload: bytes) -> None:
        open_ones = [s for s in self._sockets if not s.closed]
        if open_ones:
            await open_ones[-1].send_bytes(self._data_frame(payload))

    def _data_frame(self, payload: bytes) -> bytes:
        frame_id = uuid.uuid4().hex
        with self._changed:
            self._frames[frame_id] = json.loads(payload)["header"]["event_id"]
        headers = {
            "type": "event",
            "message_id": frame_id,
            "trace_id": uuid.uuid4().hex,
            "sum": "1",
            "seq": "0",
        }
        return encode_frame({"SeqID": 0, "LogID": 0, "service": 7, "method": 1, "headers": headers,
                             "payload": payload})  # fmt: skip

    async def _close_all(self) -> None:
        for socket in list(self._sockets):
            await socket.close()

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ticket = request.query.get("ticket", "")
        with self._changed:
            known = ticket in self._tickets
            self._tickets.discard(ticket)
        if not known:
            raise web.HTTPForbidden(headers={"handshake-status": "403", "handshake-msg": "invalid ticket"})
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        with self._changed:
            self._sockets.append(socket)
            self.connections += 1
            pending = list(self._pending.values())
            self._changed.notify_all()
        for payload in pending:
            await socket.send_bytes(self._data_frame(payload))
        try:
            async for raw in socket:
                if raw.type == WSMsgType.BINARY:
                    await self._received(socket, decode_frame(raw.data))
        finally:
            with self._changed:
                self._sockets.remove(socket)
                self._changed.notify_all()
        return socket

    async def _received(self, socket: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        kind = frame["headers"].get("type")
        if frame.get("method") == 0 and kind == "ping":
            with self._changed:
                self.pings += 1
                self._changed.notify_all()
            pong = {"service": 7, "method": 0, "headers": {"type": "pong"},
                    "payload": json.dumps(self._config()).encode()}  # fmt: skip
            await socket.send_bytes(encode_frame(pong))
            return
        answer = json.loads(frame["payload"])
        if answer.get("data"):
            answer["data"] = json.loads(base64.b64decode(answer["data"]))
        with self._changed:
            event_id = self._frames.get(frame["headers"].get("message_id", ""), "")
            self.responses.setdefault(event_id, []).append(answer)
            if answer.get("code") == 200:
                self._pending.pop(event_id, None)
            self._changed.notify_all()

    async def _api(self, request: web.Request) -> web.Response:
        path, method = request.match_info["path"], request.method
        if request.content_type == "multipart/form-data":
            return await self._upload(request, path)
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return _answer(9499, "the body is not JSON", status=400)
        size = len(await request.read()) if request.can_read_body else 0
        with self._changed:
            self.calls.append((method, path, body))
            self._changed.notify_all()
        if path == "auth/v3/tenant_access_token/internal":
            if (body.get("app_id"), body.get("app_secret")) != (APP_ID, APP_SECRET):
                return _answer(10014, "app secret invalid", status=400)
            token = f"t-{uuid.uuid4().hex}"
            with self._changed:
                self.tokens.add(token)
            return _answer(0, "ok", tenant_access_token=token, expire=7200)
        if request.headers.get("Authorization", "").removeprefix("Bearer ") not in self.tokens:
            return _answer(99991663, "Invalid access token for authorization.", status=400)
        if path == "bot/v3/info" and method == "GET":
            return _answer(
                0, "ok", bot={"open_id": BOT_OPEN_ID, "app_name": "Hermetic", "activate_status": 2}
            )
        parts = path.split("/")
        if parts[:2] == ["im", "v1"] and parts[2:3] == ["messages"]:
            if method == "GET" and len(parts) == 6 and parts[4] == "resources":
                return self._resource(parts[3], parts[5], request.query.get("type", ""))
            answer = self._message(method, parts[3:], request.query, body, size)
            held = self.hold_cards
            if held is not None and method == "POST" and '"button"' in str(body.get("content", "")):
                await asyncio.to_thread(held.wait, 60)
            return answer
        return _answer(404, f"no {method} {path}", status=404)

    def _message(
        self, method: str, rest: list[str], query: Any, body: dict[str, Any], size: int
    ) -> web.Response:
        kind = body.get("msg_type", "interactive")
        if kind in ("interactive", "post") and size > CARD_LIMIT:
            return _answer(230025, "The length of the message content reaches its limit.", status=400)
        try:
            content = json.loads(body["content"])
        except (KeyError, TypeError, ValueError):
            return _answer(230001, "Your request contains an invalid request parameter: content.", status=400)
        with self._changed:
            if method == "PATCH" and len(rest) == 1:
                sent = self.messages.get(rest[0])
                if sent is None or sent["msg_type"] != "interactive":
                    return _answer(230031, "The message is not a card, or not found.", status=400)
                sent["content"] = content
                sent["patches"] += 1
                self._changed.notify_all()
                return _answer(0, data={})
            if method == "POST" and rest == []:
                chat, reply_to = str(body.get("receive_id", "")), None
                if query.get("receive_id_type") == "open_id":
                    chat = f"oc_p2p_{chat}"
            elif method == "POST" and len(rest) == 2 and rest[1] == "reply":
                chat, reply_to = self._chat_of(rest[0]), rest[0]
                if not chat:
                    return _answer(230011, "The message was not found.", status=400)
            else:
                return _answer(404, "no such message call", status=404)
            message_id = f"om_{uuid.uuid4().hex}"
            self.messages[message_id] = {
                "chat": chat, "msg_type": kind, "content": content, "reply_to": reply_to,
                "in_thread": bool(body.get("reply_in_thread")), "patches": 0,
            }  # fmt: skip
            self._changed.notify_all()
        return _answer(0, data={"message_id": message_id, "chat_id": chat, "msg_type": kind})

    def _chat_of(self, message_id: str) -> str:
        """The chat of a message the app sent or a user sent ("" for one unknown)."""
        if message_id in self.messages:
            return str(self.messages[message_id]["chat"])
        return self._user_messages.get(message_id, "")

    def _resource(self, message_id: str, key: str, kind: str) -> web.Response:
        if key not in self.files or kind not in ("image", "file"):
            return _answer(234003, "File not in msg.", status=400)
        name, data = self.files[key]
        headers = {"Content-Disposition": f'attachment; filename="{name}"'}
        return web.Response(body=data, headers=headers, content_type="application/octet-stream")

    async def _upload(self, request: web.Request, path: str) -> web.Response:
        if request.headers.get("Authorization", "").removeprefix("Bearer ") not in self.tokens:
            return _answer(99991663, "Invalid access token for authorization.", status=400)
        form = await request.post()
        if path == "im/v1/images":
            field, prefix = form.get("image"), "img_v3"
            described = {"image_type": form.get("image_type")}
        elif path == "im/v1/files":
            field, prefix = form.get("file"), "file_v3"
            described = {"file_type": form.get("file_type"), "file_name": form.get("file_name")}
        else:
            return _answer(404, f"no upload at {path}", status=404)
        if not isinstance(field, web.FileField):
            return _answer(234001, "Invalid request param.", status=400)
        key = f"{prefix}_{uuid.uuid4().hex}"
        name = str(described.get("file_name") or field.filename)
        with self._changed:
            self.files[key] = (name, field.file.read())
            self.calls.append(("POST", path, described))
            self._changed.notify_all()
        return _answer(0, data={"image_key": key} if prefix == "img_v3" else {"file_key": key})


def card_markdown(card: dict[str, Any]) -> str:
    """The text of a card's markdown elements (a JSON 2.0 card's body, or a 1.0 card's elements)."""
    elements = (card.get("body") or {}).get("elements") or card.get("elements") or []
    return "\n".join(str(e.get("content", "")) for e in elements if e.get("tag") == "markdown")


def card_buttons(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Every button on a card, wherever it sits (in a column set's columns, or in the body)."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("tag") == "button":
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(card.get("body") or card.get("elements"))
    return found
