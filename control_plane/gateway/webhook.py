"""The generic webhook: an HMAC-signed POST in; the reply in the HTTP response, or POSTed (signed the
same way) to the request's callback_url.

A request carries `X-Hermetic-Timestamp` (unix seconds) and `X-Hermetic-Signature: sha256=HEX`, the
HMAC-SHA256 of `TIMESTAMP.BODY` under the shared secret; a timestamp off by more than `max_skew` is
refused, so a captured request cannot be replayed later. The body is JSON:
`{"id": "...", "chat": "...", "user": "...", "text": "...", "callback_url": "https://..."?}`; `id` is
the caller's message id (a retry with the same id is recognised and not answered twice).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections import defaultdict, deque
from pathlib import Path

import aiohttp
from aiohttp import web
from pydantic import BaseModel, Field, ValidationError

from ..config.chat import WebhookSettings
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound
from .listener import listen

log = logging.getLogger("hermetic.gateway.webhook")
MAX_BODY = 1_000_000


class WebhookMessage(BaseModel):
    id: str = Field(min_length=1, max_length=200)
    chat: str = Field(min_length=1, max_length=200)
    user: str = Field("webhook", max_length=200)
    text: str = Field(min_length=1, max_length=100_000)
    callback_url: str | None = Field(None, max_length=2000)


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


class WebhookAdapter(Adapter):
    platform = "webhook"
    text_limit = 100_000
    streams = False
    authenticates = True

    def __init__(self, settings: WebhookSettings) -> None:
        self.settings = settings
        self._secret = settings.secret.get_secret_value().encode()
        self._waiting: dict[str, deque[asyncio.Future[str]]] = defaultdict(deque)
        self._callbacks: dict[str, str] = {}
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None
        self.port: int | None = None
        """The port listened on (settings.port 0 picks a free one)."""

    async def connect(self) -> None:
        self._client = self._client or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def disconnect(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def receive(self, deliver: Deliver) -> None:
        app = web.Application(client_max_size=MAX_BODY)

        async def handle(request: web.Request) -> web.Response:
            return await self._handle(request, deliver)

        app.router.add_post(self.settings.path, handle)
        self._runner, self.port = await listen(app, self.settings.host, self.settings.port)
        log.info("webhook listening on %s:%s%s", self.settings.host, self.port, self.settings.path)
        await asyncio.Event().wait()  # serve until cancelled

    async def _handle(self, request: web.Request, deliver: Deliver) -> web.Response:
        body = await request.read()
        stamp = request.headers.get("X-Hermetic-Timestamp", "")
        given = request.headers.get("X-Hermetic-Signature", "")
        if not stamp.isdigit() or abs(time.time() - int(stamp)) > self.settings.max_skew:
            log.warning("webhook: refused a request with a missing or stale timestamp")
            return web.json_response({"error": "missing or stale X-Hermetic-Timestamp"}, status=401)
        if not hmac.compare_digest(given, sign(self._secret, stamp, body)):
            log.warning("webhook: refused a request with a bad signature")
            return web.json_response({"error": "bad signature"}, status=401)
        try:
            message = WebhookMessage.model_validate_json(body)
        except ValidationError as exc:
            return web.json_response({"error": f"not a valid message: {exc.errors()[0]['msg']}"}, status=400)
        waiter: asyncio.Future[str] | None = None
        if message.callback_url:
            self._callbacks[message.chat] = message.callback_url
        else:
            waiter = asyncio.get_running_loop().create_future()
            self._waiting[message.chat].append(waiter)
        inbound = Inbound(
            platform=self.platform, chat=message.chat, message_id=message.id, user=message.user,
            text=message.text, reply_url=message.callback_url,
        )  # fmt: skip
        if not await deliver(inbound):
            self._forget(message.chat, waiter)
            return web.json_response({"status": "duplicate"})
        if waiter is None:
            return web.json_response({"status": "accepted"}, status=202)
        try:
            return web.json_response({"reply": await asyncio.wait_for(waiter, self.settings.reply_timeout)})
        except TimeoutError:
            self._forget(message.chat, waiter)
            return web.json_response(
                {"status": "accepted", "note": "the reply is still being written"}, status=202
            )

    def _forget(self, chat: str, waiter: asyncio.Future[str] | None) -> None:
        if waiter is not None and waiter in self._waiting[chat]:
            self._waiting[chat].remove(waiter)

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        waiting = self._waiting.get(chat)
        while waiting:
            waiter = waiting.popleft()
            if not waiter.done():
                waiter.set_result(text)
                return f"r{time.time_ns()}"
        url = self._callbacks.get(chat)
        if url is None or self._client is None:
            raise AdapterError(f"webhook chat {chat}: no request waits and no callback_url is known")
        payload = json.dumps(
            {"chat": chat, "text": text, "choices": [b.label for b in buttons or []]}
        ).encode()
        stamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "X-Hermetic-Timestamp": stamp,
            "X-Hermetic-Signature": sign(self._secret, stamp, payload),
        }
        try:
            async with self._client.post(url, data=payload, headers=headers) as response:
                if response.status >= 500:
                    raise ConnectionLost(f"callback {url} answered {response.status}")
                if response.status >= 400:
                    raise AdapterError(f"callback {url} refused the reply: {response.status}")
        except aiohttp.ClientError as exc:
            raise ConnectionLost(f"callback {url}: {exc}") from exc
        return f"c{time.time_ns()}"

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        return None  # replies are not streamed here: the final one is sent whole

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        raise AdapterError("the webhook has no way to send files")

    async def fetch(self, attachment: Attachment) -> bytes:
        raise AdapterError("the webhook takes no files")
