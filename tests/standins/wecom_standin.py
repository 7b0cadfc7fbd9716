"""A local stand-in of WeCom's server API (https://developer.work.weixin.qq.com/document/path/90664) and
its callbacks, for the gateway's WeCom adapter. It records what it was sent, and plays WeCom's side of
callback mode: each user message is encrypted and signed as the published scheme says (加解密方案: AES-256-CBC
under base64(EncodingAESKey + "="), IV its first 16 bytes, PKCS#7 padding to 32 bytes, over 16 random bytes
+ length (4 bytes, network order) + message + CorpID; msg_signature = SHA-1 of the sorted token,
timestamp, nonce and ciphertext), written here from that text and not from the adapter's code, and
POSTed to the gateway's callback URL until it answers 200.

Implemented (under /cgi-bin/): GET gettoken (corpid + corpsecret; tokens live 7,200 s, `expire_tokens`
ends them early so the next call is answered 42001); POST message/send (text, markdown, image, file,
template_card; over 2,048 bytes of content is errcode 45002); POST message/update_template_card (a
response_code works once); POST media/upload (multipart `media`); GET media/get (the bytes, with
Content-Disposition; an unknown media_id is errcode 40007). Errors are `{"errcode", "errmsg"}`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from standin_server import StandinServer

CORP_ID = "ww5a1b2c3d4e5f6a7b"
AGENT_ID = 1000002
SECRET = "wecom-app-secret"
CALLBACK_TOKEN = "wecomtoken"
AES_KEY = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"
"""A 43-character EncodingAESKey."""
REDELIVERY = 120.0
"""Seconds a callback is POSTed again until answered 200 (a gateway starting on a loaded machine)."""
CONTENT_LIMIT = 2048
MEDIA_TYPES = ("image", "voice", "video", "file")


def seal(plain: bytes, *, key: str = AES_KEY, receive_id: str = CORP_ID) -> str:
    """The published encryption: base64 of AES-256-CBC over random(16) + len + msg + receiveid."""
    raw_key = base64.b64decode(key + "=")
    body = os.urandom(16) + len(plain).to_bytes(4, "big") + plain + receive_id.encode()
    pad = 32 - len(body) % 32
    body += bytes([pad]) * pad
    encryptor = Cipher(algorithms.AES(raw_key), modes.CBC(raw_key[:16])).encryptor()
    return base64.b64encode(encryptor.update(body) + encryptor.finalize()).decode()


def sign(timestamp: str, nonce: str, encrypted: str, token: str = CALLBACK_TOKEN) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypted])).encode()).hexdigest()


def message_xml(fields: dict[str, str | int]) -> bytes:
    parts = [
        f"<{name}>{value}</{name}>" if isinstance(value, int) else f"<{name}><![CDATA[{value}]]></{name}>"
        for name, value in fields.items()
    ]
    return ("<xml>" + "".join(parts) + "</xml>").encode()


class WeComStandin(StandinServer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.sent: list[dict[str, Any]] = []
        """every message message/send accepted, with its "msgid" """
        self.updates: list[dict[str, Any]] = []
        self.media: dict[str, tuple[str, bytes]] = {}
        self.tokens: dict[str, float] = {}
        """access_token -> when it expires"""
        self.codes: set[str] = set()
        """response_codes not used yet"""
        self.callback_url = ""
        super().__init__("wecom-standin")

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def gateway_config(self, allow_users: list[str]) -> dict[str, Any]:
        """The gateway's wecom settings for this stand-in, its callback listener on a free port."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.callback_url = f"http://127.0.0.1:{port}/wecom"
        return {
            "corp_id": CORP_ID, "agent_id": AGENT_ID, "secret": SECRET, "token": CALLBACK_TOKEN,
            "encoding_aes_key": AES_KEY, "api_base": self.api_base, "port": port, "allow_users": allow_users,
        }  # fmt: skip

    # -- the test's side -------------------------------------------------------------------

    def user_says(self, user: str, text: str = "", **fields: str | int) -> dict[str, str | int]:
        """A user's message (text, or the given fields) delivered until answered 200; its fields."""
        message: dict[str, str | int] = {
            "ToUserName": CORP_ID, "FromUserName": user, "CreateTime": int(time.time()),
            "MsgType": "text", "Content": text, "MsgId": str(secrets.randbits(63)), "AgentID": AGENT_ID,
        }  # fmt: skip
        message |= fields
        self.deliver(message)
        return message

    def press(self, user: str, card: dict[str, Any], key: str) -> None:
        """The user presses a card's button: the template_card_event, with a fresh response_code."""
        code = uuid.uuid4().hex
        with self._changed:
            self.codes.add(code)
        self.deliver(
            {
                "ToUserName": CORP_ID, "FromUserName": user, "CreateTime": int(time.time()),
                "MsgType": "event", "Event": "template_card_event", "EventKey": key,
                "TaskId": card["template_card"]["task_id"], "CardType": "button_interaction",
                "ResponseCode": code, "AgentID": AGENT_ID,
            }
        )  # fmt: skip

    def deliver(self, message: dict[str, str | int], within: float = REDELIVERY) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                status, _ = self.post_callback(message_xml(message))
            except (urllib.error.URLError, OSError):
                status = 0
            if status == 200:
                return
            time.sleep(0.1)
        raise AssertionError(f"the callback never answered 200 for {message}")

    def post_callback(
        self, plain: bytes, *, key: str = AES_KEY, receive_id: str = CORP_ID, token: str = CALLBACK_TOKEN
    ) -> tuple[int, str]:
        """One encrypted, signed callback POST; its status and body (the test decides what is wrong)."""
        encrypted = seal(plain, key=key, receive_id=receive_id)
        timestamp, nonce = str(int(time.time())), secrets.token_hex(5)
        query = {
            "msg_signature": sign(timestamp, nonce, encrypted, token),
            "timestamp": timestamp,
            "nonce": nonce,
        }
        body = (
            f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName><AgentID><![CDATA[{AGENT_ID}]]></AgentID>"
            f"<Encrypt><![CDATA[{encrypted}]]></Encrypt></xml>"
        ).encode()
        return self.request("POST", query, body)

    def verify_url(self, echo: str, *, token: str = CALLBACK_TOKEN) -> tuple[int, str]:
        """The GET WeCom sends when the callback URL is saved: its status and body."""
        encrypted = seal(echo.encode())
        timestamp, nonce = str(int(time.time())), secrets.token_hex(5)
        signature = sign(timestamp, nonce, encrypted, token)
        query = {"msg_signature": signature, "timestamp": timestamp, "nonce": nonce, "echostr": encrypted}
        return self.request("GET", query)

    def request(self, method: str, query: dict[str, str], body: bytes | None = None) -> tuple[int, str]:
        url = f"{self.callback_url}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, body, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 (loopback)
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read().decode()

    def wait_listening(self, timeout: float = 120) -> None:
        port = int(self.callback_url.split(":")[2].split("/")[0])
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    return
            assert time.monotonic() < deadline, "the callback listener never opened"
            time.sleep(0.02)

    def upload(self, name: str, data: bytes) -> str:
        media_id = f"3{uuid.uuid4().hex}"
        with self._changed:
            self.media[media_id] = (name, data)
        return media_id

    def expire_tokens(self) -> None:
        with self._changed:
            self.tokens = dict.fromkeys(self.tokens, 0.0)

    def called(self, path: str) -> list[dict[str, Any]]:
        with self._changed:
            return [body for _, p, body in self.calls if p == path]

    def messages_to(self, user: str) -> list[dict[str, Any]]:
        with self._changed:
            return [m for m in self.sent if m["touser"] == user]

    def texts(self, user: str) -> list[str]:
        return [
            m[m["msgtype"]]["content"] for m in self.messages_to(user) if m["msgtype"] in ("text", "markdown")
        ]

    # -- the server ------------------------------------------------------------------------

    def _progress(self) -> object:
        return [(m, p, b.get("errcode")) for m, p, b in self.calls]

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=30_000_000)
        app.router.add_route("*", "/cgi-bin/{path:.*}", self._api)
        return app

    def _answer(self, method: str, path: str, errcode: int, errmsg: str, **rest: Any) -> web.Response:
        with self._changed:
            self.calls.append((method, path, {"errcode": errcode, **rest}))
            self._changed.notify_all()
        return web.json_response({"errcode": errcode, "errmsg": errmsg, **rest})

    async def _api(self, request: web.Request) -> web.Response:
        path, method, query = request.match_info["path"], request.method, request.query
        if path == "gettoken":
            if query.get("corpid") != CORP_ID or query.get("corpsecret") != SECRET:
                return self._answer(method, path, 40001, "invalid credential")
            token = secrets.token_urlsafe(24)
            with self._changed:
                self.tokens[token] = time.time() + 7200
            return self._answer(method, path, 0, "ok", access_token=token, expires_in=7200)
        expires = self.tokens.get(query.get("access_token", ""))
        if expires is None:
            return self._answer(method, path, 40014, "invalid access_token")
        if expires < time.time():
            return self._answer(method, path, 42001, "access_token expired")
        if method == "POST" and path == "media/upload":
            form = await request.post()
            upload = form.get("media")
            if not isinstance(upload, web.FileField) or query.get("type") not in MEDIA_TYPES:
                return self._answer(method, path, 40005, "invalid file type")
            media_id = self.upload(upload.filename, upload.file.read())
            return self._answer(method, path, 0, "ok", type=query["type"], media_id=media_id)
        if method == "GET" and path == "media/get":
            found = self.media.get(query.get("media_id", ""))
            if found is None:
                return self._answer(method, path, 40007, "invalid media_id")
            with self._changed:
                self.calls.append((method, path, {"media_id": query["media_id"]}))
                self._changed.notify_all()
            disposition = f'attachment; filename="{found[0]}"'
            return web.Response(body=found[1], content_type="application/octet-stream",
                                headers={"Content-Disposition": disposition})  # fmt: skip
        body = await request.json()
        if path == "message/send":
            return self._send(body)
        if path == "message/update_template_card":
            with self._changed:
                known = body.get("response_code") in self.codes
                self.codes.discard(body.get("response_code"))
                if known:
                    self.updates.append(body)
            return self._answer(
                method, path, 0 if known else 40058, "ok" if known else "invalid response_code"
            )
        return self._answer(method, path, 404, f"no such API: {path}")

    def _send(self, body: dict[str, Any]) -> web.Response:
        kind = body.get("msgtype", "")
        if body.get("agentid") != AGENT_ID:
            return self._answer("POST", "message/send", 40056, "invalid agentid")
        content = (body.get(kind) or {}).get("content")
        if content is not None and len(content.encode()) > CONTENT_LIMIT:
            return self._answer("POST", "message/send", 45002, "content size out of limit")
        media = (body.get(kind) or {}).get("media_id")
        if media is not None and media not in self.media:
            return self._answer("POST", "message/send", 40007, "invalid media_id")
        msgid = secrets.token_urlsafe(16)
        extra: dict[str, str] = {}
        if kind == "template_card":
            extra["response_code"] = uuid.uuid4().hex
        with self._changed:
            self.codes.update(extra.values())
            self.sent.append(body | {"msgid": msgid})
        return self._answer("POST", "message/send", 0, "ok", invaliduser="", msgid=msgid, **extra)
