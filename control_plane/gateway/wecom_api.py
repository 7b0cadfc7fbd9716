"""WeCom's server API (https://developer.work.weixin.qq.com/document/path/90664) over httpx: the
access_token from `gettoken` (corpid + the application's secret), kept until shortly before it expires
and fetched again when a call answers 42001 (expired) or 40014 (invalid), and every answer's `errcode`
in the gateway's terms. No maintained Python client of this API exists (wechatpy's last release is
from 2021, and synchronous), and the API is plain JSON over HTTPS."""

from __future__ import annotations

from typing import Any

import httpx

from ..config.chat import WeComSettings
from .app_token import AppToken
from .base import AdapterError, ConnectionLost, RateLimited

STALE_TOKEN = frozenset({42001, 40014})
"""access_token expired / invalid: fetch a new one and call again."""
BUSY = frozenset({-1})
"""System busy: the call may work later."""
THROTTLED = frozenset({45009, 45033})
"""Over the call frequency or concurrency limit."""


class WeComApi:
    def __init__(self, settings: WeComSettings) -> None:
        self.settings = settings
        self._client: httpx.AsyncClient | None = None
        """Opened at the first call (again after `close`, as a gateway reconnects)."""
        self._token = AppToken(self._new_token)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def token(self, stale: str | None = None) -> str:
        """The current access_token; a new one when it is near its expiry or is `stale`."""
        return await self._token.get(stale)

    async def _new_token(self) -> tuple[str, float]:
        """gettoken: a new access_token and its lifetime in seconds."""
        params = {"corpid": self.settings.corp_id, "corpsecret": self.settings.secret.get_secret_value()}
        body = _checked(_answer(await self._send("GET", "gettoken", params=params)))
        if not body.get("access_token"):
            raise ConnectionLost("WeCom's gettoken answered no access_token")
        return str(body["access_token"]), float(body.get("expires_in", 7200))

    async def call(
        self,
        path: str,
        *,
        params: dict[str, str] | None = None,
        json: dict[str, Any] | None = None,
        files: dict[str, tuple[str, bytes]] | None = None,
    ) -> httpx.Response:
        """`path` under /cgi-bin/ with the access_token (POST with `json` or `files`, else GET); the
        response. Raises AdapterError, RateLimited, ConnectionLost."""
        method = "POST" if json is not None or files is not None else "GET"
        request = {"json": json, "files": files}
        token = await self.token()
        response = await self._send(method, path, params={**(params or {}), "access_token": token}, **request)
        if _answer(response).get("errcode") in STALE_TOKEN:
            token = await self.token(stale=token)
            query = {**(params or {}), "access_token": token}
            response = await self._send(method, path, params=query, **request)
        _checked(_answer(response))
        return response

    async def post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        """A JSON call's answer (errcode 0)."""
        answer: dict[str, Any] = (await self.call(path, json=payload)).json()
        return answer

    async def _send(self, method: str, path: str, **request: Any) -> httpx.Response:
        if self._client is None:
            base = self.settings.api_base.rstrip("/") + "/cgi-bin/"
            self._client = httpx.AsyncClient(base_url=base, timeout=30)
        try:
            response = await self._client.request(method, path, **request)
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"WeCom unreachable: {exc}") from exc
        if response.status_code == 429:
            raise RateLimited(float(response.headers.get("Retry-After", "1")))
        if response.status_code >= 500:
            raise ConnectionLost(f"WeCom answered {response.status_code}")
        if response.status_code >= 400:
            raise AdapterError(f"WeCom refused {path}: HTTP {response.status_code}")
        return response


def _answer(response: httpx.Response) -> dict[str, Any]:
    """A JSON answer's body; {} for media/get's bytes (which come without a JSON content type)."""
    if "json" not in response.headers.get("content-type", ""):
        return {}
    try:
        body = response.json()
    except ValueError as exc:
        raise ConnectionLost(f"WeCom answered what is not JSON: {response.text[:200]!r}") from exc
    return body if isinstance(body, dict) else {}


def _checked(body: dict[str, Any]) -> dict[str, Any]:
    """The answer, when its errcode is 0; else the error it stands for."""
    code = int(body.get("errcode", 0) or 0)
    if code == 0:
        return body
    said = f"WeCom errcode {code}: {body.get('errmsg', '')}"
    if code in THROTTLED:
        raise RateLimited(2.0)
    if code in BUSY:
        raise ConnectionLost(said)
    raise AdapterError(said)
