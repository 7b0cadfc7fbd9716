"""A local stand-in of DingTalk's Stream mode and the OpenAPI a robot uses
(https://open.dingtalk.com/document/direction/stream-mode-protocol-access-description and the robot,
card and file references), for the official dingtalk-stream SDK and the adapter's httpx client to talk
to. It records what it was sent.

The Stream protocol: POST /v1.0/gateway/connections/open with `{clientId, clientSecret, subscriptions,
ua, localIp}` answers `{endpoint, ticket}`; the WebSocket at that endpoint is opened with `?ticket=`
(each ticket once). Frames are JSON `{specVersion, type: SYSTEM|EVENT|CALLBACK, headers: {appId,
connectionId, contentType, messageId, time, topic}, data: "<JSON as a string>"}`; the client answers each
with an ACK `{code, headers: {contentType, messageId}, message, data}`. A CALLBACK not ACKed is pushed
again when the client connects anew, or when the test says (`redeliver`), as DingTalk retries an
unacknowledged push. SYSTEM `ping` is
answered with its `data` echoed; SYSTEM `disconnect` tells the client to reconnect (the server closes
the socket shortly after).

The OpenAPI (header x-acs-dingtalk-access-token, 401 `{code: InvalidAuthentication}` without a valid
one): POST /v1.0/oauth2/accessToken `{appKey, appSecret}` -> `{accessToken, expireIn}`;
POST /v1.0/robot/oToMessages/batchSend `{robotCode, userIds, msgKey, msgParam}` and
POST /v1.0/robot/groupMessages/send `{robotCode, openConversationId, msgKey, msgParam}` ->
`{processQueryKey}`; POST /v1.0/card/instances/createAndDeliver and PUT /v1.0/card/instances;
POST /v1.0/robot/messageFiles/download `{downloadCode, robotCode}` -> `{downloadUrl}` (GET it for the
bytes; a file made by `upload_large` is streamed in chunks with no Content-Length, and `streamed` counts
what went out before the reader hung up); and the legacy POST /media/upload?access_token=&type=
(multipart `media`) -> `{errcode: 0, media_id}`. Errors are `{code, message, requestid}`.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from aiohttp import WSMsgType, web
from standin_server import StandinServer

CLIENT_ID = "dingtest0appkey"
CLIENT_SECRET = "dingtalk-test-secret"
BOT = "robot-user-id"
MESSAGE_TOPIC = "/v1.0/im/bot/messages/get"
CARD_TOPIC = "/v1.0/card/instances/callback"


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"code": code, "message": message, "requestid": uuid.uuid4().hex}, status=status)


class DingTalkStandin(StandinServer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.sent: list[dict[str, Any]] = []
        """every robot message accepted, with "to" (a user id or a conversation id) and "msgParam" parsed"""
        self.cards: dict[str, dict[str, Any]] = {}
        """outTrackId -> the card (its cardParamMap as last put)"""
        self.acks: dict[str, list[dict[str, Any]]] = {}
        """frame messageId -> the client's ACKs of it"""
        self.connections = 0
        self.files: dict[str, tuple[str, bytes]] = {}
        self.large: dict[str, int] = {}
        """downloadCode -> the size of a file streamed when downloaded"""
        self.streamed: dict[str, int] = {}
        """downloadCode of a large file -> the bytes of it sent so far"""
        self.tokens: set[str] = set()
        self._tickets: set[str] = set()
        self._pending: dict[str, dict[str, Any]] = {}
        """frames pushed and not ACKed yet, by messageId (pushed again on the next connection)"""
        self._frame_of: dict[str, str] = {}
        """a robot message's msgId -> the messageId of the last frame that pushed it"""
        self._sockets: list[web.WebSocketResponse] = []
        super().__init__("dingtalk-standin")

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def gateway_config(self, allow_users: list[str], **more: Any) -> dict[str, Any]:
        return {
            "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "api_base": self.api_base,
            "oapi_base": self.api_base, "allow_users": allow_users,
        } | more  # fmt: skip

    # -- the test's side -------------------------------------------------------------------

    def user_says(
        self, user: str, text: str = "", *, group: str | None = None, at_bot: bool = False,
        message: dict[str, Any] | None = None, msg_id: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """A robot message from `user` (in `group`, a conversation id cid..., else 1:1) pushed as a
        CALLBACK frame; the message (its data)."""
        data = {
            "conversationId": group or f"cid1to1{user}", "conversationType": "2" if group else "1",
            "msgId": msg_id or f"msg{uuid.uuid4().hex}", "senderNick": f"user {user}", "isAdmin": False,
            "senderStaffId": user, "senderId": f"$:LWCP_v1:${user}", "chatbotUserId": BOT,
            "robotCode": CLIENT_ID, "createAt": int(time.time() * 1000), "isInAtList": bool(at_bot),
            "sessionWebhook": f"{self.api_base}/robot/sendBySession?session=x",
            "sessionWebhookExpiredTime": int(time.time() * 1000) + 3_600_000,
        } | (message or {"msgtype": "text", "text": {"content": text}})  # fmt: skip
        if group:
            data["conversationTitle"] = "a group"
        frame = self.push(MESSAGE_TOPIC, data)
        with self._changed:
            self._frame_of[data["msgId"]] = frame
        return data

    def upload_large(self, name: str, size: int) -> str:
        """A large file a user sent, streamed when downloaded (no Content-Length): its downloadCode."""
        code = f"dc{uuid.uuid4().hex}"
        with self._changed:
            self.large[code] = size
            self.streamed[code] = 0
        return code

    def upload(self, name: str, data: bytes) -> str:
        """A file a user sent: its downloadCode."""
        code = f"dc{uuid.uuid4().hex}"
        with self._changed:
            self.files[code] = (name, data)
        return code

    def press(self, track: str, user: str, data: str) -> str:
        """A press of a card's button: the card callback; its frame's messageId."""
        params = {"actionIds": ["button"], "params": {"data": data}}
        callback = {
            "outTrackId": track, "userId": user, "corpId": "ding-corp", "type": "actionCallback",
            "content": json.dumps({"cardPrivateData": params}), "extension": "{}",
        }  # fmt: skip
        return self.push(CARD_TOPIC, callback)

    def push(self, topic: str, data: dict[str, Any], kind: str = "CALLBACK") -> str:
        """A frame on the connection (kept until ACKed, and pushed again on a new one); its messageId."""
        message_id = uuid.uuid4().hex
        frame = {
            "specVersion": "1.0", "type": kind,
            "headers": {
                "appId": CLIENT_ID, "connectionId": "conn", "contentType": "application/json",
                "messageId": message_id, "time": str(int(time.time() * 1000)), "topic": topic,
            },
            "data": json.dumps(data),
        }  # fmt: skip
        with self._changed:
            if kind == "CALLBACK":
                self._pending[message_id] = frame
        self._run(self._send(frame))
        return message_id

    def redeliver(self) -> None:
        """Push every frame not ACKed yet again, as DingTalk retries an unacknowledged push."""
        with self._changed:
            pending = list(self._pending.values())
        for frame in pending:
            self._run(self._send(frame))

    def expire_tokens(self) -> None:
        """Every access token issued so far stops working (as one revoked, or expired early)."""
        with self._changed:
            self.tokens.clear()

    def drop(self, *, announced: bool) -> None:
        """End the connections: a SYSTEM disconnect (the client closes and reconnects), or closed."""
        if announced:
            self.push("disconnect", {"reason": "server restarting"}, kind="SYSTEM")
        else:
            self._run(self._close_all())

    def wait_ack(self, message_id: str) -> dict[str, Any]:
        """The client's ACK of the frame `message_id` (once it came)."""
        return self.wait_for(lambda: self.acks.get(message_id))[-1]

    def wait_acked(self, message: dict[str, Any]) -> dict[str, Any]:
        """The ACK of the last frame that pushed the robot message `message` (user_says's)."""
        with self._changed:
            frame = self._frame_of[message["msgId"]]
        return self.wait_ack(frame)

    def messages_to(self, chat: str) -> list[dict[str, Any]]:
        with self._changed:
            return [m for m in self.sent if m["to"] == chat]

    def texts(self, chat: str) -> list[str]:
        return [m["msgParam"]["text"] for m in self.messages_to(chat) if m["msgKey"] == "sampleMarkdown"]

    def called(self, path: str) -> list[dict[str, Any]]:
        with self._changed:
            return [body for _, p, body in self.calls if path in p]

    # -- the server ------------------------------------------------------------------------

    def _progress(self) -> object:
        return [(m, p) for m, p, _ in self.calls]

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/stream", self._stream)
        app.router.add_get("/downloads/{code}", self._download)
        app.router.add_post("/media/upload", self._upload)
        app.router.add_route("*", "/v1.0/{path:.*}", self._api)
        return app

    async def _send(self, frame: dict[str, Any]) -> None:
        open_ones = [s for s in self._sockets if not s.closed]
        if open_ones:
            await open_ones[-1].send_str(json.dumps(frame))

    async def _close_all(self) -> None:
        for socket in list(self._sockets):
            await socket.close()

    async def _stream(self, request: web.Request) -> web.WebSocketResponse:
        ticket = request.query.get("ticket", "")
        with self._changed:
            known = ticket in self._tickets
            self._tickets.discard(ticket)
        if not known:
            raise web.HTTPUnauthorized(text="unknown or used ticket")
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        with self._changed:
            self._sockets.append(socket)
            self.connections += 1
            pending = list(self._pending.values())
            self._changed.notify_all()
        for frame in pending:
            await socket.send_str(json.dumps(frame))
        try:
            async for raw in socket:
                if raw.type != WSMsgType.TEXT:
                    continue
                ack = json.loads(raw.data)
                message_id = str((ack.get("headers") or {}).get("messageId", ""))
                with self._changed:
                    self.acks.setdefault(message_id, []).append(ack)
                    if ack.get("code") == 200:
                        self._pending.pop(message_id, None)
                    self._changed.notify_all()
        finally:
            with self._changed:
                self._sockets.remove(socket)
                self._changed.notify_all()
        return socket

    async def _download(self, request: web.Request) -> web.StreamResponse:
        code = request.match_info["code"]
        if code in self.large:
            response = web.StreamResponse()
            await response.prepare(request)
            chunk = b"\0" * 65536
            try:
                while self.streamed[code] < self.large[code]:
                    await response.write(chunk)
                    with self._changed:
                        self.streamed[code] += len(chunk)
            except (ConnectionResetError, ConnectionError):
                return response  # the reader hung up
            await response.write_eof()
            return response
        if code not in self.files:
            return _error(404, "NotFound", "no such file")
        return web.Response(body=self.files[code][1])

    async def _upload(self, request: web.Request) -> web.Response:
        if request.query.get("access_token") not in self.tokens:
            return web.json_response({"errcode": 40014, "errmsg": "不合法的access_token"})
        form = await request.post()
        media = form["media"]
        media_id = f"@lA{uuid.uuid4().hex}"
        with self._changed:
            self.files[media_id] = (media.filename, media.file.read())  # type: ignore[union-attr]
            self.calls.append(("POST", "/media/upload", {"type": request.query.get("type")}))
            self._changed.notify_all()
        return web.json_response({"errcode": 0, "errmsg": "ok", "media_id": media_id, "type": "file"})

    async def _api(self, request: web.Request) -> web.Response:
        path, method = "/v1.0/" + request.match_info["path"], request.method
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError:
            return _error(400, "InvalidParameter", "the body is not JSON")
        with self._changed:
            self.calls.append((method, path, body))
            self._changed.notify_all()
        if path == "/v1.0/gateway/connections/open":
            return self._open(body)
        if path == "/v1.0/oauth2/accessToken":
            if (body.get("appKey"), body.get("appSecret")) != (CLIENT_ID, CLIENT_SECRET):
                return _error(400, "invalidClientIdOrSecret", "无效的clientId或者clientSecret")
            token = uuid.uuid4().hex
            with self._changed:
                self.tokens.add(token)
            return web.json_response({"accessToken": token, "expireIn": 7200})
        if request.headers.get("x-acs-dingtalk-access-token") not in self.tokens:
            return _error(401, "InvalidAuthentication", "不合法的access_token")
        if path in ("/v1.0/robot/oToMessages/batchSend", "/v1.0/robot/groupMessages/send"):
            return self._message(body)
        if path == "/v1.0/card/instances/createAndDeliver" and method == "POST":
            with self._changed:
                self.cards[body["outTrackId"]] = body
                self._changed.notify_all()
            deliver = {"spaceType": body["openSpaceId"].split("//")[1].split(".")[0], "success": True}
            return web.json_response({"success": True, "result": {"outTrackId": body["outTrackId"],
                                                                  "deliverResults": [deliver]}})  # fmt: skip
        if path == "/v1.0/card/instances" and method == "PUT":
            with self._changed:
                if body.get("outTrackId") not in self.cards:
                    return _error(400, "CardNotExist", "card not found")
                self.cards[body["outTrackId"]]["cardData"] = body["cardData"]
                self._changed.notify_all()
            return web.json_response({"success": True, "result": True})
        if path == "/v1.0/robot/messageFiles/download":
            if body.get("downloadCode") not in self.files and body.get("downloadCode") not in self.large:
                return _error(400, "InvalidDownloadCode", "downloadCode is invalid")
            return web.json_response({"downloadUrl": f"{self.api_base}/downloads/{body['downloadCode']}"})
        return _error(404, "NotFound", f"no {method} {path}")

    def _open(self, body: dict[str, Any]) -> web.Response:
        if (body.get("clientId"), body.get("clientSecret")) != (CLIENT_ID, CLIENT_SECRET):
            return _error(401, "InvalidAuthentication", "clientId or clientSecret is wrong")
        ticket = uuid.uuid4().hex
        with self._changed:
            self._tickets.add(ticket)
        return web.json_response({"endpoint": f"ws://127.0.0.1:{self.port}/stream", "ticket": ticket})

    def _message(self, body: dict[str, Any]) -> web.Response:
        try:
            param = json.loads(body["msgParam"])
        except (KeyError, TypeError, ValueError):
            return _error(400, "InvalidParameter", "msgParam is not JSON")
        users = body.get("userIds") or []
        targets = users or [body.get("openConversationId", "")]
        with self._changed:
            for to in targets:
                self.sent.append({"to": to, "msgKey": body.get("msgKey"), "msgParam": param})
            self._changed.notify_all()
        return web.json_response({"processQueryKey": uuid.uuid4().hex, "invalidStaffIdList": [],
                                  "flowControlledStaffIdList": []})  # fmt: skip
