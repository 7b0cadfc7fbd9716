"""A local stand-in of WeCom's side of an intelligent robot (智能机器人) in API mode, written from the
published reference (developer.work.weixin.qq.com/document/path/100719 receiving, 101031 passive
replies, 101138 response_url, 101033 encryption), not from the adapter's code.

WeCom's side, played against the gateway's listener: a user's message (text, mixed, image, file; a group
message only as one @-mentioning the robot) is JSON, encrypted (receiveid empty) and signed as the scheme
says (wecom_standin.seal / sign), POSTed as {"encrypt"} until answered 200 (WeCom retries); its passive
reply is checked (msgsignature over the reply's timestamp and the callback's nonce) and opened. A stream
reply is then refreshed as WeCom does: a `msgtype: stream` callback with stream.id, POSTed again and again
(every REFRESH_EVERY s) until an answer says finish, or 6 minutes from the message; a refresh that fails
(the gateway down) is tried again in the same way (the reference does not say what WeCom does then). A
card press is one template_card_event POST, not retried (WeCom drops a press not answered in 5 s).

Served (loopback): POST /cgi-bin/aibot/response?response_code=C, the response_url of each message and
press (markdown up to 20,480 bytes; template_card only for a one-to-one chat; each code once, for an
hour; errors as {"errcode", "errmsg"}); GET /files/NAME, a file a user sent, AES-encrypted as the
reference says (the callback key, IV its first 16 bytes, PKCS#7 to 32 bytes).
"""

from __future__ import annotations

import base64
import json
import secrets
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from standin_server import StandinServer
from wecom_standin import AES_KEY, CALLBACK_TOKEN, seal, sign

BOT_ID = "aib-hermetic-test"
REDELIVERY = 120.0
"""Seconds a message callback is POSTed again until answered 200 (a gateway starting on a loaded machine)."""
REFRESH_EVERY = 0.3
STREAM_WINDOW = 360.0
CONTENT_LIMIT = 20480


def unseal(encrypted: str) -> dict[str, Any]:
    """A passive reply's plaintext JSON: AES-256-CBC, random(16) + length + message + empty receiveid."""
    key = base64.b64decode(AES_KEY + "=")
    decryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).decryptor()
    padded = decryptor.update(base64.b64decode(encrypted)) + decryptor.finalize()
    plain = padded[: -padded[-1]]
    length = int.from_bytes(plain[16:20], "big")
    assert plain[20 + length :] == b"", "a robot's receiveid is empty"
    answer: dict[str, Any] = json.loads(plain[20 : 20 + length])
    return answer


def encrypt_file(data: bytes) -> bytes:
    key = base64.b64decode(AES_KEY + "=")
    padder = padding.PKCS7(256).padder()
    encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
    return encryptor.update(padder.update(data) + padder.finalize()) + encryptor.finalize()


class WeComBotStandin(StandinServer):
    def __init__(self) -> None:
        self.callback_url = ""
        self.streams: dict[str, dict[str, Any]] = {}
        """msgid -> {"chat", "answers": every passive reply to it and its refreshes, "finished"}"""
        self.posts: list[dict[str, Any]] = []
        """what each response_url was sent, with its "chat" """
        self.codes: dict[str, tuple[str, str]] = {}
        """response_code not used yet -> (chat, chattype)"""
        self.files: dict[str, bytes] = {}
        self._pollers: list[threading.Thread] = []
        super().__init__("wecom-bot-standin")

    def gateway_config(self, port: int, allow_users: list[str], **extra: Any) -> dict[str, Any]:
        self.callback_url = f"http://127.0.0.1:{port}/wecom-bot"
        return {
            "bot_id": BOT_ID, "token": CALLBACK_TOKEN, "encoding_aes_key": AES_KEY, "port": port,
            "allow_users": allow_users, **extra,
        }  # fmt: skip

    # -- the test's side -------------------------------------------------------------------

    def says(
        self, user: str, text: str = "", *, group: str | None = None, body: dict[str, Any] | None = None,
        msgid: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """A user's message (text, or `body`'s msgtype and fields) delivered until answered 200, its stream
        then refreshed in the background until finished; the message."""
        chat = group or user
        message: dict[str, Any] = {
            "msgid": msgid or secrets.token_urlsafe(18), "aibotid": BOT_ID,
            "chattype": "group" if group else "single", "from": {"userid": user},
            "response_url": self._response_url(chat, "group" if group else "single"),
            **(body or {"msgtype": "text", "text": {"content": text}}),
        }  # fmt: skip
        if group:
            message["chatid"] = group
        answer = self.deliver(message)
        self._record(message["msgid"], chat, answer)
        if answer is not None and answer.get("msgtype", "").startswith("stream"):
            poller = threading.Thread(
                target=self._refresh, args=(message, answer["stream"]["id"]), daemon=True
            )
            self._pollers.append(poller)
            poller.start()
        return message

    def press(
        self, user: str, card: dict[str, Any], key: str, group: str | None = None
    ) -> dict[str, Any] | None:
        """A press of a card's button: one template_card_event POST; the opened reply (None: empty)."""
        chat = group or user
        event: dict[str, Any] = {
            "msgid": secrets.token_urlsafe(18), "create_time": int(time.time()), "aibotid": BOT_ID,
            "from": {"userid": user}, "chattype": "group" if group else "single",
            "response_url": self._response_url(chat, "group" if group else "single"), "msgtype": "event",
            "event": {"eventtype": "template_card_event", "template_card_event": {
                "card_type": "button_interaction", "event_key": key, "task_id": card["task_id"]}},
        }  # fmt: skip
        if group:
            event["chatid"] = group
        status, answer = self.post_callback(json.dumps(event).encode())
        assert status == 200, (status, answer)
        return answer

    def deliver(self, message: dict[str, Any], within: float = REDELIVERY) -> dict[str, Any] | None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                status, answer = self.post_callback(json.dumps(message).encode())
            except (urllib.error.URLError, OSError):
                status, answer = 0, None
            if status == 200:
                return answer
            time.sleep(0.1)
        raise AssertionError(f"the callback never answered 200 for {message}")

    def post_callback(self, plain: bytes, *, token: str = CALLBACK_TOKEN) -> tuple[int, Any]:
        """One encrypted, signed callback POST; its status and its reply (opened; None when empty; the text
        of a refusal)."""
        encrypted = seal(plain, receive_id="")
        timestamp, nonce = str(int(time.time())), secrets.token_hex(5)
        query = {
            "msg_signature": sign(timestamp, nonce, encrypted, token),
            "timestamp": timestamp,
            "nonce": nonce,
        }
        url = f"{self.callback_url}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, json.dumps({"encrypt": encrypted}).encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (loopback)
                raw = response.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read().decode()
        if not raw:
            return 200, None
        sealed = json.loads(raw)
        assert sealed["nonce"] == nonce, "a passive reply carries the callback's nonce"
        assert sealed["msgsignature"] == sign(str(sealed["timestamp"]), nonce, sealed["encrypt"], token)
        return 200, unseal(sealed["encrypt"])

    def serve_file(self, data: bytes) -> str:
        """A file a user sends, stored encrypted; its download URL."""
        name = uuid.uuid4().hex
        with self._changed:
            self.files[name] = encrypt_file(data)
        return f"http://127.0.0.1:{self.port}/files/{name}"

    def shown(self, msgid: str) -> dict[str, Any] | None:
        """A message's finished stream: its last answer (None while it streams)."""
        with self._changed:
            stream = self.streams.get(msgid)
            return stream["answers"][-1] if stream and stream["finished"] else None

    def answers(self, msgid: str) -> list[dict[str, Any]]:
        with self._changed:
            return list(self.streams.get(msgid, {}).get("answers", []))

    def texts(self, chat: str) -> list[str]:
        """What the chat shows from the robot: each finished stream's text and each markdown post."""
        with self._changed:
            finished = [
                s["answers"][-1]["stream"]["content"]
                for s in self.streams.values()
                if s["chat"] == chat and s["finished"]
            ]
            posted = [p["markdown"]["content"] for p in self.posts if p["chat"] == chat and "markdown" in p]
        return [text for text in finished + posted if text]

    def close(self) -> None:
        super().close()
        for poller in self._pollers:
            poller.join(5)

    # -- WeCom's refreshes -----------------------------------------------------------------

    def _response_url(self, chat: str, kind: str) -> str:
        code = uuid.uuid4().hex
        with self._changed:
            self.codes[code] = (chat, kind)
        return f"http://127.0.0.1:{self.port}/cgi-bin/aibot/response?response_code={code}"

    def _record(self, msgid: str, chat: str, answer: dict[str, Any] | None) -> None:
        with self._changed:
            stream = self.streams.setdefault(msgid, {"chat": chat, "answers": [], "finished": False})
            if answer is not None:
                stream["answers"].append(answer)
                stream["finished"] = bool(answer.get("stream", {}).get("finish"))
            self._changed.notify_all()

    def _refresh(self, message: dict[str, Any], stream_id: str) -> None:
        deadline = time.monotonic() + STREAM_WINDOW
        refresh = {key: message[key] for key in ("msgid", "aibotid", "chattype", "from") if key in message}
        refresh |= {"msgtype": "stream", "stream": {"id": stream_id}}
        if "chatid" in message:
            refresh["chatid"] = message["chatid"]
        while time.monotonic() < deadline and self._runner is not None:
            time.sleep(REFRESH_EVERY)
            try:
                status, answer = self.post_callback(json.dumps(refresh).encode())
            except (urllib.error.URLError, OSError):
                continue  # the gateway is down: asked again
            if status != 200 or answer is None:
                continue
            assert answer["stream"]["id"] == stream_id
            assert len(answer["stream"].get("content", "").encode()) <= CONTENT_LIMIT
            self._record(message["msgid"], message.get("chatid") or message["from"]["userid"], answer)
            if answer["stream"].get("finish"):
                return

    # -- the server ------------------------------------------------------------------------

    def _progress(self) -> object:
        return {"streams": self.streams, "posts": self.posts}

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/cgi-bin/aibot/response", self._respond)
        app.router.add_get("/files/{name}", self._file)
        return app

    async def _file(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["name"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    async def _respond(self, request: web.Request) -> web.Response:
        body = await request.json()
        with self._changed:
            found = self.codes.pop(request.query.get("response_code", ""), None)
        if found is None:
            return web.json_response({"errcode": 40058, "errmsg": "invalid response_code (used or unknown)"})
        chat, kind = found
        msgtype = body.get("msgtype")
        if msgtype == "template_card" and kind != "single":
            return web.json_response({"errcode": 40008, "errmsg": "template_card only in a one-to-one chat"})
        if msgtype == "markdown" and len(body["markdown"].get("content", "").encode()) > CONTENT_LIMIT:
            return web.json_response({"errcode": 45002, "errmsg": "content size out of limit"})
        if msgtype not in ("markdown", "template_card"):
            return web.json_response({"errcode": 40008, "errmsg": f"invalid message type {msgtype}"})
        with self._changed:
            self.posts.append(body | {"chat": chat})
            self._changed.notify_all()
        return web.json_response({"errcode": 0, "errmsg": "ok"})
