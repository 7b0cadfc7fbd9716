"""DingTalk's OpenAPI as the DingTalk adapter calls it, with httpx (asyncio): the app's access token
(cached until shortly before it expires), robot messages to a user (oToMessages/batchSend) or a group
(groupMessages/send), interactive cards (create-and-deliver, update), and files both ways.

The SDK (dingtalk-stream) has helpers for some of these, but they are synchronous (requests, no
timeout) on the gateway's event loop, take their host from an environment variable read at import,
and its media upload is fixed to https://oapi.dingtalk.com: each call here goes to the configured host.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from ..config.chat import DingTalkSettings
from .app_token import AppToken
from .base import AdapterError, ConnectionLost, RateLimited


def is_group(chat: str) -> bool:
    """A group's conversation id (openConversationId) starts with "cid"; a 1:1 chat is the user's id."""
    return chat.startswith("cid")


class DingTalkApi:
    def __init__(self, settings: DingTalkSettings) -> None:
        self.settings = settings
        self.robot_code = settings.robot_code or settings.client_id
        self._http = httpx.AsyncClient(base_url=settings.api_base.rstrip("/"), timeout=30)
        self._token = AppToken(self._new_token)

    async def close(self) -> None:
        await self._http.aclose()

    async def token(self) -> str:
        """The app's access token, cached until near its expiry."""
        return await self._token.get()

    async def _new_token(self) -> tuple[str, float]:
        """POST /v1.0/oauth2/accessToken: a new token and its lifetime in seconds."""
        secret = self.settings.client_secret.get_secret_value()
        body = {"appKey": self.settings.client_id, "appSecret": secret}
        found = await self._call("POST", "/v1.0/oauth2/accessToken", json=body, auth=False)
        return str(found["accessToken"]), float(found.get("expireIn", 7200))

    async def send(self, chat: str, key: str, param: dict[str, Any]) -> str:
        """A robot message (msgKey `key`, e.g. sampleMarkdown) to a user or a group; its processQueryKey."""
        body: dict[str, Any] = {"robotCode": self.robot_code, "msgKey": key, "msgParam": json.dumps(param)}
        if is_group(chat):
            found = await self._call("POST", "/v1.0/robot/groupMessages/send", json=body | {
                "openConversationId": chat
            })  # fmt: skip
        else:
            found = await self._call("POST", "/v1.0/robot/oToMessages/batchSend", json=body | {
                "userIds": [chat]
            })  # fmt: skip
            if chat in (found.get("invalidStaffIdList") or []):
                raise AdapterError(f"DingTalk does not know the user {chat}")
        return str(found.get("processQueryKey", ""))

    async def send_card(self, chat: str, track_id: str, params: dict[str, str]) -> None:
        """An interactive card from the configured template, its callbacks over the Stream connection."""
        space = "IM_GROUP" if is_group(chat) else "IM_ROBOT"
        body: dict[str, Any] = {
            "cardTemplateId": self.settings.card_template_id, "outTrackId": track_id,
            "cardData": {"cardParamMap": params}, "callbackType": "STREAM",
            "openSpaceId": f"dtv1.card//{space}.{chat}",
            "imGroupOpenSpaceModel": {"supportForward": False},
            "imRobotOpenSpaceModel": {"supportForward": False},
        }  # fmt: skip
        if is_group(chat):
            body["imGroupOpenDeliverModel"] = {"robotCode": self.robot_code}
        else:
            body["imRobotOpenDeliverModel"] = {"spaceType": "IM_ROBOT", "robotCode": self.robot_code}
        await self._call("POST", "/v1.0/card/instances/createAndDeliver", json=body)

    async def update_card(self, track_id: str, params: dict[str, str]) -> None:
        body = {
            "outTrackId": track_id, "cardData": {"cardParamMap": params},
            "cardUpdateOptions": {"updateCardDataByKey": True},
        }  # fmt: skip
        await self._call("PUT", "/v1.0/card/instances", json=body)

    async def download_url(self, code: str) -> str:
        """Where a file a user sent is read (briefly): its downloadCode exchanged for a URL."""
        asked = {"downloadCode": code, "robotCode": self.robot_code}
        found = await self._call("POST", "/v1.0/robot/messageFiles/download", json=asked)
        if not found.get("downloadUrl"):
            raise AdapterError("DingTalk answered no downloadUrl for the file")
        return str(found["downloadUrl"])

    async def upload(self, path: Path) -> str:
        """A file uploaded as media (the legacy POST /media/upload on oapi_base); its media_id."""
        url = f"{self.settings.oapi_base.rstrip('/')}/media/upload"
        params = {"access_token": await self.token(), "type": "file"}
        try:
            with path.open("rb") as handle:
                response = await self._http.post(url, params=params, files={"media": (path.name, handle)})
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"DingTalk unreachable: {exc}") from exc
        found = _json(response)
        if response.status_code != 200 or found.get("errcode", 0) != 0 or "media_id" not in found:
            raise AdapterError(f"DingTalk refused the upload: {found.get('errmsg') or response.status_code}")
        return str(found["media_id"])

    async def _call(
        self, method: str, path: str, *, json: Any, auth: bool = True, refused: str | None = None
    ) -> dict[str, Any]:
        """One OpenAPI call with its errors in the gateway's terms; a 401 (the token revoked or expired
        early) is tried once more with a new token (`refused`: the one it carried, fetched anew once
        however many calls it failed)."""
        token = await self._token.get(stale=refused) if auth else None
        headers = {"x-acs-dingtalk-access-token": token} if token is not None else {}
        try:
            response = await self._http.request(method, path, json=json, headers=headers)
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"DingTalk unreachable: {exc}") from exc
        found = _json(response)
        if response.status_code == 200:
            return found
        if response.status_code == 401 and token is not None and refused is None:
            return await self._call(method, path, json=json, refused=token)
        if response.status_code == 429 or "Throttling" in str(found.get("code", "")):
            raise RateLimited(1.0)
        if response.status_code >= 500:
            raise ConnectionLost(f"DingTalk answered {response.status_code}")
        raise AdapterError(f"DingTalk refused {path}: {found.get('code')}: {found.get('message')}")


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        found = response.json()
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
