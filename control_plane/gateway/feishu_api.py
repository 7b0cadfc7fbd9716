"""Feishu / Lark's open platform REST API as the Feishu adapter calls it, through the official SDK's
client (lark-oapi, its async calls on the configured domain): the app's tenant_access_token, the bot's
own open id, messages (create, reply in a thread, patch a card), images and files both ways.

The SDK can fetch the token itself, but synchronously (requests) inside its async calls, and it keeps a
token the platform stopped taking until it expires; here the token is fetched with the SDK's async call,
set on each request (enable_set_token), and fetched anew once when a call says it is invalid.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import lark_oapi as lark
from lark_oapi.api.auth.v3 import InternalTenantAccessTokenRequest, InternalTenantAccessTokenRequestBody
from lark_oapi.api.im.v1 import (
    CreateFileRequest,
    CreateFileRequestBody,
    CreateImageRequest,
    CreateImageRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    GetMessageResourceRequest,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.model import BaseRequest, BaseResponse, RequestOption

from ..config.chat import FeishuSettings
from .base import AdapterError, ConnectionLost, RateLimited

TOKEN_MARGIN = 300.0
"""Seconds before its expiry a token is renewed (a call in flight must not carry an expired one)."""
INVALID_TOKEN = {99991661, 99991663, 99991668}
"""The token is missing, invalid or expired: fetched anew and the call made once more."""
RATE_LIMITED = {99991400, 230020}
"""The app's request rate, or one chat's message rate, went over Feishu's limit."""
IMAGES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".ico", ".tiff", ".heic"}
FILE_TYPES = {".pdf": "pdf", ".doc": "doc", ".docx": "doc", ".xls": "xls", ".xlsx": "xls", ".ppt": "ppt",
              ".pptx": "ppt", ".mp4": "mp4", ".opus": "opus"}  # fmt: skip
"""im/v1/files' file_type by suffix; any other file is a `stream`."""
R = TypeVar("R", bound=BaseResponse)


def receive_id_type(chat: str) -> str:
    """A chat (oc_...) is addressed by chat_id; a user's open id (ou_..., a delivery target) by open_id."""
    return "open_id" if chat.startswith("ou_") else "chat_id"


class FeishuApi:
    def __init__(self, settings: FeishuSettings) -> None:
        self.settings = settings
        secret = settings.app_secret.get_secret_value()
        self.client = (
            lark.Client.builder().app_id(settings.app_id).app_secret(secret).domain(settings.base_url)
            .enable_set_token(True).timeout(30).log_level(lark.LogLevel.WARNING).build()
        )  # fmt: skip
        self.im = self.client.im.v1
        self._token = ""
        self._expires = 0.0

    async def token(self) -> str:
        """The app's tenant_access_token (auth/v3/tenant_access_token/internal), cached until near expiry."""
        if self._token and time.monotonic() < self._expires:
            return self._token
        body = InternalTenantAccessTokenRequestBody.builder().app_id(self.settings.app_id)
        body = body.app_secret(self.settings.app_secret.get_secret_value())
        request = InternalTenantAccessTokenRequest.builder().request_body(body.build()).build()
        response = await self._checked(
            "tenant_access_token", lambda: self.client.auth.v3.tenant_access_token.ainternal(request)
        )
        found = _json(response)  # the token sits beside code and msg, not in data
        self._token = str(found.get("tenant_access_token", ""))
        self._expires = time.monotonic() + float(found.get("expire", 7200)) - TOKEN_MARGIN
        return self._token

    async def bot_open_id(self) -> str:
        """The bot's own open id (bot/v3/info): how a group message that @mentions it is told apart."""
        request = BaseRequest.builder().http_method(lark.HttpMethod.GET).uri("/open-apis/bot/v3/info")
        request = request.token_types({lark.AccessTokenType.TENANT}).build()
        response = await self._call("bot/v3/info", lambda option: self.client.arequest(request, option))
        return str((_json(response).get("bot") or {}).get("open_id", ""))

    async def send(self, chat: str, kind: str, content: dict[str, Any], *, thread: str | None = None) -> str:
        """A message (msg_type `kind`) to a chat, or into the thread under the message `thread`; its id."""
        raw = json.dumps(content, ensure_ascii=False)
        if thread:
            reply = ReplyMessageRequestBody.builder().msg_type(kind).content(raw).reply_in_thread(True)
            asked = ReplyMessageRequest.builder().message_id(thread).request_body(reply.build()).build()
            answer: Any = await self._call("im/v1/messages reply", lambda o: self.im.message.areply(asked, o))
        else:
            body = CreateMessageRequestBody.builder().receive_id(chat).msg_type(kind).content(raw).build()
            request = CreateMessageRequest.builder().receive_id_type(receive_id_type(chat)).request_body(body)
            made = request.build()
            answer = await self._call("im/v1/messages", lambda o: self.im.message.acreate(made, o))
        return str(answer.data.message_id)

    async def patch(self, message_id: str, card: dict[str, Any]) -> None:
        """An interactive card the app sent, replaced (im/v1/messages PATCH)."""
        body = PatchMessageRequestBody.builder().content(json.dumps(card, ensure_ascii=False)).build()
        request = PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
        await self._call("im/v1/messages patch", lambda o: self.im.message.apatch(request, o))

    async def upload(self, path: Path) -> tuple[str, dict[str, str]]:
        """A file uploaded to im/v1/images or im/v1/files; the msg_type and content that send it."""
        with path.open("rb") as handle:
            if path.suffix.lower() in IMAGES:
                image = CreateImageRequestBody.builder().image_type("message").image(handle).build()
                asked = CreateImageRequest.builder().request_body(image).build()
                made: Any = await self._call("im/v1/images", lambda o: self.im.image.acreate(asked, o))
                return "image", {"image_key": str(made.data.image_key)}
            kind = FILE_TYPES.get(path.suffix.lower(), "stream")
            file = CreateFileRequestBody.builder().file_type(kind).file_name(path.name).file(handle).build()
            request = CreateFileRequest.builder().request_body(file).build()
            made = await self._call("im/v1/files", lambda o: self.im.file.acreate(request, o))
            return "file", {"file_key": str(made.data.file_key)}

    async def download(self, message_id: str, key: str, kind: str) -> bytes:
        """A file or image a user sent, read from its message (im/v1/messages/:id/resources/:key)."""
        request = GetMessageResourceRequest.builder().message_id(message_id).file_key(key).type(kind).build()
        found: Any = await self._call(
            "im/v1/messages resources", lambda o: self.im.message_resource.aget(request, o)
        )
        return bytes(found.file.read())

    async def _call(
        self, what: str, make: Callable[[RequestOption], Awaitable[R]], *, again: bool = True
    ) -> R:
        """One call with the token set; an invalid token is fetched anew and the call made once more."""
        option = RequestOption.builder().tenant_access_token(await self.token()).build()
        try:
            return await self._checked(what, lambda: make(option))
        except _InvalidToken:
            if not again:
                raise AdapterError(f"Feishu refused {what}: the new tenant_access_token too") from None
            self._token = ""
            return await self._call(what, make, again=False)

    async def _checked(self, what: str, make: Callable[[], Awaitable[R]]) -> R:
        """The SDK's call with its errors in the gateway's terms."""
        try:
            response = await make()
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"Feishu unreachable: {exc!r}") from exc
        if response.success():
            return response
        status = response.raw.status_code if response.raw is not None else 0
        if response.code in INVALID_TOKEN:
            raise _InvalidToken(what)
        if status == 429 or response.code in RATE_LIMITED:
            headers = response.raw.headers if response.raw is not None else {}
            raise RateLimited(float(headers.get("x-ogw-ratelimit-reset") or 1))
        if status >= 500 or response.code is None:
            raise ConnectionLost(f"Feishu answered {status} to {what}")
        raise AdapterError(f"Feishu refused {what}: {response.code}: {response.msg}")


class _InvalidToken(Exception):
    """The call's tenant_access_token was refused."""


def _json(response: BaseResponse) -> dict[str, Any]:
    try:
        found = json.loads(response.raw.content) if response.raw is not None else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
