"""Feishu / Lark's open platform REST API as the Feishu adapter calls it, with one httpx client kept
open on the configured domain: the app's tenant_access_token (cached until shortly before it expires,
fetched anew once when a call says it is invalid), the bot's own open id, messages (create, reply in a
thread, patch a card), images and files both ways.

The SDK's REST client (lark-oapi's lark.Client) is not used for these: each of its async calls builds a
new httpx.AsyncClient (a new connection, and a TLS context that took up to 177 ms of the gateway's event
loop per call on the loaded test machine; the office benchmark's 20-chat median was 6.7 s with it, 1.7
s without), and it fetches its token synchronously (requests) inside its async calls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from ..config.chat import FeishuSettings
from .app_token import AppToken
from .base import AdapterError, ConnectionLost, RateLimited

INVALID_TOKEN = {99991661, 99991663, 99991668}
"""The token is missing, invalid or expired: fetched anew and the call made once more."""
RATE_LIMITED = {99991400, 230020}
"""The app's request rate, or one chat's message rate, went over Feishu's limit."""
IMAGES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".ico", ".tiff", ".heic"}
FILE_TYPES = {".pdf": "pdf", ".doc": "doc", ".docx": "doc", ".xls": "xls", ".xlsx": "xls", ".ppt": "ppt",
              ".pptx": "ppt", ".mp4": "mp4", ".opus": "opus"}  # fmt: skip
"""im/v1/files' file_type by suffix; any other file is a `stream`."""


def receive_id_type(chat: str) -> str:
    """A chat (oc_...) is addressed by chat_id; a user's open id (ou_..., a delivery target) by open_id."""
    return "open_id" if chat.startswith("ou_") else "chat_id"


class FeishuApi:
    def __init__(self, settings: FeishuSettings) -> None:
        self.settings = settings
        self._http = httpx.AsyncClient(base_url=f"{settings.base_url}/open-apis", timeout=30)
        self._token = AppToken(self._new_token)

    async def close(self) -> None:
        await self._http.aclose()

    async def token(self) -> str:
        """The app's tenant_access_token, cached until near its expiry."""
        return await self._token.get()

    async def _new_token(self) -> tuple[str, float]:
        """auth/v3/tenant_access_token/internal: a new token and its lifetime in seconds."""
        secret = self.settings.app_secret.get_secret_value()
        asked = {"app_id": self.settings.app_id, "app_secret": secret}
        found = await self._request("POST", "/auth/v3/tenant_access_token/internal", {"json": asked})
        return str(found.get("tenant_access_token", "")), float(found.get("expire", 7200))

    async def bot_open_id(self) -> str:
        """The bot's own open id (bot/v3/info): how a group message that @mentions it is told apart."""
        found = await self._call("GET", "/bot/v3/info")
        return str((found.get("bot") or {}).get("open_id", ""))

    async def send(self, chat: str, kind: str, content: dict[str, Any], *, thread: str | None = None) -> str:
        """A message (msg_type `kind`) to a chat, or into the thread under the message `thread`; its id."""
        body: dict[str, Any] = {"msg_type": kind, "content": json.dumps(content, ensure_ascii=False)}
        if thread:
            body["reply_in_thread"] = True
            found = await self._call("POST", f"/im/v1/messages/{quote(thread, safe='')}/reply", json=body)
        else:
            query = {"receive_id_type": receive_id_type(chat)}
            found = await self._call(
                "POST", "/im/v1/messages", json=body | {"receive_id": chat}, params=query
            )
        return str((found.get("data") or {}).get("message_id", ""))

    async def patch(self, message_id: str, card: dict[str, Any]) -> None:
        """An interactive card the app sent, replaced (im/v1/messages PATCH)."""
        body = {"content": json.dumps(card, ensure_ascii=False)}
        await self._call("PATCH", f"/im/v1/messages/{quote(message_id, safe='')}", json=body)

    async def upload(self, path: Path) -> tuple[str, dict[str, str]]:
        """A file uploaded to im/v1/images or im/v1/files; the msg_type and content that send it."""
        with path.open("rb") as handle:
            if path.suffix.lower() in IMAGES:
                files = {"image": (path.name, handle)}
                found = await self._call("POST", "/im/v1/images", data={"image_type": "message"}, files=files)
                return "image", {"image_key": str((found.get("data") or {}).get("image_key", ""))}
            described = {"file_type": FILE_TYPES.get(path.suffix.lower(), "stream"), "file_name": path.name}
            found = await self._call(
                "POST", "/im/v1/files", data=described, files={"file": (path.name, handle)}
            )
            return "file", {"file_key": str((found.get("data") or {}).get("file_key", ""))}

    async def download(self, message_id: str, key: str, kind: str) -> bytes:
        """A file or image a user sent, read from its message (im/v1/messages/:id/resources/:key)."""
        path = f"/im/v1/messages/{quote(message_id, safe='')}/resources/{quote(key, safe='')}"
        found = await self._call("GET", path, params={"type": kind}, raw=True)
        return bytes(found["content"])

    async def _call(
        self, method: str, path: str, *, refused: str | None = None, **asked: Any
    ) -> dict[str, Any]:
        """One call with the app's token; an invalid token is fetched anew (once however many calls it
        failed: `refused` is the one it carried) and the call made once more."""
        token = await self._token.get(stale=refused)
        headers = {"Authorization": f"Bearer {token}"}
        try:
            return await self._request(method, path, asked | {"headers": headers})
        except _InvalidToken:
            if refused is not None:
                raise AdapterError(f"Feishu refused {path}: the new tenant_access_token too") from None
            return await self._call(method, path, refused=token, **asked)

    async def _request(self, method: str, path: str, asked: dict[str, Any]) -> dict[str, Any]:
        """One request with its errors in the gateway's terms; `raw=True` answers {"content": bytes}."""
        raw = asked.pop("raw", False)
        try:
            response = await self._http.request(method, path, **asked)
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"Feishu unreachable: {exc!r}") from exc
        if raw and response.status_code == 200:
            return {"content": response.content}
        try:
            found = response.json()
        except ValueError:
            found = {}
        code = found.get("code") if isinstance(found, dict) else None
        if response.status_code == 200 and code == 0:
            return found  # type: ignore[no-any-return]
        if code in INVALID_TOKEN:
            raise _InvalidToken(path)
        if response.status_code == 429 or code in RATE_LIMITED:
            raise RateLimited(float(response.headers.get("x-ogw-ratelimit-reset") or 1))
        if response.status_code >= 500 or (code is None and response.status_code == 200):
            raise ConnectionLost(f"Feishu answered {response.status_code} to {path}")
        raise AdapterError(f"Feishu refused {path}: {code}: {found.get('msg')}")


class _InvalidToken(Exception):
    """The call's tenant_access_token was refused."""
