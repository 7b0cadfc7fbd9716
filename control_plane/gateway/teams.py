"""Microsoft Teams through the Bot Framework, with Microsoft's Teams SDK (microsoft-teams-apps): its
activity models in, its token validator on each POST to the messaging endpoint (served by the gateway's
listener), its HTTP client and activity models out to the connector service.

Each POST carries `Authorization: Bearer <JWT>` signed by the Bot Framework: the SDK's TokenValidator
checks the signature against the key set beside `openid_metadata_url`, the issuer
(https://api.botframework.com), the audience (our app id), expiry, and that the token's `serviceurl`
claim is the activity's serviceUrl. A bad or missing token is 401 before anything is stored. A valid
activity is answered 200 only after it was stored; the activity id recognises Teams' redelivery.

Replies go to the activity's serviceUrl (kept per conversation in the store, so a restart and a
scheduled delivery know it), with a bot token from the token endpoint (client credentials; cached until
shortly before it expires). msal, which the SDK's App uses for that token, accepts only https
authorities, so the token request is one httpx POST here. A reply streams by updating the message
(PUT); buttons are an Adaptive Card with Action.Submit, whose press comes back as a message activity
with `value`: in a group chat it counts only from a user in allow_users or admitted by pairing. Files
both ways (download URLs, pasted images, consent cards and uploads) are teams_files.py's.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import jwt
from aiohttp import web
from microsoft_teams.api.activities import ActivityTypeAdapter
from microsoft_teams.api.activities.invoke.file_consent import FileConsentInvokeActivity
from microsoft_teams.api.activities.message.message import MessageActivity, MessageActivityInput
from microsoft_teams.api.activities.typing import TypingActivityInput
from microsoft_teams.api.auth.cloud_environment import PUBLIC, with_overrides
from microsoft_teams.api.models import FileConsentCardResponse
from microsoft_teams.apps.auth.token_validator import TokenValidator
from microsoft_teams.cards import AdaptiveCard, SubmitAction, TextBlock
from microsoft_teams.common.http import Client, ClientOptions
from pydantic import ValidationError

from ..config.chat import TeamsSettings
from .app_token import AppToken
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound, RateLimited
from .latest import LatestInbound
from .listener import listen
from .ordered import NotStored, PerChat
from .records import GatewayStore
from .teams_files import TeamsFiles

log = logging.getLogger("hermetic.gateway.teams")
TEXT_LIMIT = 24000
"""UTF-8 bytes of one message's text: Teams takes about 28 KB per message, the envelope included."""


class TeamsAdapter(Adapter):
    platform = "teams"
    text_limit = TEXT_LIMIT

    def __init__(self, settings: TeamsSettings, store: GatewayStore) -> None:
        self.settings = settings
        self.store = store
        self._secret = settings.app_password.get_secret_value()
        cloud = with_overrides(PUBLIC, openid_metadata_url=settings.openid_metadata_url)
        self._validator = TokenValidator.for_service(settings.app_id, cloud=cloud)
        self._http = Client(ClientOptions(token=self._bot_token))
        self._token_client = httpx.AsyncClient(timeout=30)
        self._token = AppToken(self._new_token)
        self._latest = LatestInbound(store, self.platform)
        """a reply is a Reply to Activity of its conversation's latest stored activity"""
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.files = TeamsFiles(settings, self._bot_token)
        self._uploads: set[asyncio.Task[None]] = set()
        self._order = PerChat()

    @staticmethod
    def length(text: str) -> int:
        return len(text.encode())

    @property
    def lock_name(self) -> str:
        return f"teams:{self.settings.app_id}"

    async def connect(self) -> None:
        self._token.forget()
        await self._bot_token()  # checks the app id and password

    async def disconnect(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for task in list(self._uploads):
            task.cancel()
        self.files.close()

    async def receive(self, deliver: Deliver) -> None:
        async def on_post(request: web.Request) -> web.Response:
            return await self._activity(request, deliver)

        app = web.Application(client_max_size=1_000_000)
        app.router.add_post(self.settings.path, on_post)
        self._runner, self.port = await listen(app, self.settings.host, self.settings.port)
        await asyncio.Event().wait()

    async def _activity(self, request: web.Request, deliver: Deliver) -> web.Response:
        try:
            activity: Any = ActivityTypeAdapter.validate_python(await request.json())
        except (ValueError, ValidationError):
            activity = None  # the token is checked first all the same: an unsigned caller learns nothing
        if activity is not None and not activity.service_url:
            activity = None  # without one the token's serviceurl claim could not be checked
        if activity is None:
            return await self._checked(request, None, deliver)
        try:  # the check runs in a thread: the chat's activities are checked and stored in arrival order
            checked = partial(self._checked, request, activity, deliver)
            return await self._order.submit(activity.conversation.id, checked)
        except NotStored:
            return web.Response(text="not stored", status=503)

    async def _checked(self, request: web.Request, activity: Any, deliver: Deliver) -> web.Response:
        """The activity (None: not one) once its token is checked: stored, or answered."""
        scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
        service_url = activity.service_url if activity is not None else None
        try:
            if scheme.lower() != "bearer":
                raise jwt.InvalidTokenError("no bearer token")
            # PyJWKClient fetches the key set with blocking urllib: off the event loop
            await asyncio.to_thread(asyncio.run, self._validator.validate_token(raw, service_url))
        except (jwt.InvalidTokenError, jwt.PyJWKClientError) as exc:
            log.warning("teams: refused an activity: %s", exc)
            return web.Response(text="unauthorized", status=401)
        if activity is None or service_url is None:
            return web.Response(text="not a Bot Framework activity", status=400)
        if isinstance(activity, FileConsentInvokeActivity):
            return self._file_consent(activity)
        if not isinstance(activity, MessageActivity):
            return web.Response(status=200)  # conversation updates, reactions...: nothing to answer
        try:
            message = await self._inbound(activity, service_url)
            if message is not None:
                await deliver(message)
                self._latest.stored(message.chat, message.message_id)
        except Exception:  # not stored: never a 200 (the Bot Framework may retry; else the send shows failed)
            log.exception("teams: an activity could not be stored")
            return web.Response(text="not stored", status=503)
        return web.Response(status=200)

    async def _inbound(self, activity: MessageActivity, service_url: str) -> Inbound | None:
        """The activity as the gateway's message; None when it is not for the bot (or a forged press)."""
        chat = activity.conversation.id
        direct = activity.conversation.conversation_type in (None, "personal")
        for key, value in (("service", service_url), ("scope", "personal" if direct else "group")):
            if await asyncio.to_thread(self.store.get_state, f"teams:{key}:{chat}") != value:
                await asyncio.to_thread(self.store.set_state, f"teams:{key}:{chat}", value)
        user = activity.from_.aad_object_id or activity.from_.id
        common = {"platform": self.platform, "chat": chat, "message_id": activity.id, "user": user,
                  "user_name": activity.from_.name or "", "direct": direct}  # fmt: skip
        if isinstance(activity.value, dict) and "hermetic" in activity.value:
            data, sig = str(activity.value.get("hermetic", "")), str(activity.value.get("sig", ""))
            if not hmac.compare_digest(sig, self._sign(data)):
                log.warning("teams: refused a card press whose data the gateway did not sign")
                return None
            if not direct and not await asyncio.to_thread(self._approver, user):
                log.warning("teams: %s pressed a card in %s but may not answer it", user, chat)
                who = activity.from_.name or user
                try:
                    await self.send(chat, f"Only an allowed user can answer that ({who}).")
                except (AdapterError, ConnectionLost) as exc:
                    log.warning("teams: cannot tell %s so: %s", user, exc)
                return None
            return Inbound(**common, button=data)
        if not direct:
            if not activity.is_recipient_mentioned():
                return None  # in a group chat or channel the bot answers only when @mentioned
            activity = activity.strip_mentions_text()
        files = self.files.attachments(activity, service_url)
        return Inbound(**common, text=(activity.text or "").strip(), files=files)

    def _approver(self, user: str) -> bool:
        return user in self.settings.allow_users or self.store.admitted(self.platform, user)

    def _sign(self, data: str) -> str:
        return hmac.new(self._secret.encode(), data.encode(), hashlib.sha256).hexdigest()

    async def _bot_token(self) -> str:
        """The connector's bearer token (client credentials), kept until shortly before it expires."""
        return await self._token.get()

    async def _new_token(self) -> tuple[str, float]:
        url = f"{self.settings.login_endpoint.rstrip('/')}/{self.settings.tenant_id}/oauth2/v2.0/token"
        form = {"grant_type": "client_credentials", "client_id": self.settings.app_id,
                "client_secret": self._secret, "scope": PUBLIC.bot_scope}  # fmt: skip
        try:
            answer = await self._token_client.post(url, data=form)
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"the token endpoint is unreachable: {exc}") from exc
        if answer.status_code >= 500:
            raise ConnectionLost(f"the token endpoint answered {answer.status_code}")
        if answer.status_code != 200:
            raise AdapterError(f"the token endpoint refused the app id or password: {answer.text[:200]}")
        body = answer.json()
        return str(body["access_token"]), float(body.get("expires_in", 3600))

    async def _service(self, chat: str) -> str:
        found = await asyncio.to_thread(self.store.get_state, f"teams:service:{chat}")
        if found is None:
            raise AdapterError(f"no activity came from Teams conversation {chat} yet: no service URL known")
        return f"{found.rstrip('/')}/v3/conversations/{chat}/activities"

    def _message(self, text: str, buttons: list[Button] | None) -> MessageActivityInput:
        message = MessageActivityInput(text=text or " ", text_format="markdown")
        if buttons:
            actions = [SubmitAction(title=b.label, data={"hermetic": b.data, "sig": self._sign(b.data)})
                       for b in buttons]  # fmt: skip
            message = MessageActivityInput(text_format="markdown").add_card(
                AdaptiveCard(body=[TextBlock(text=text, wrap=True)], actions=actions)
            )
        return message

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        return await self._post(_joined(chat, thread), self._message(text, buttons))

    async def _post(self, chat: str, message: MessageActivityInput) -> str:
        url = await self._service(chat)
        latest = await self._latest.get(chat)
        if latest is not None:  # threads under the user's message in a channel
            url = f"{url}/{latest}"
        body = message.model_dump(by_alias=True, exclude_none=True)
        return str((await self._call(self._http.post(url, json=body)))["id"])

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        url = f"{await self._service(chat)}/{message_id}"
        body = self._message(text, buttons).model_dump(by_alias=True, exclude_none=True)
        await self._call(self._http.put(url, json=body))

    async def typing(self, chat: str, *, thread: str | None = None) -> None:
        chat = _joined(chat, thread)
        try:
            body = TypingActivityInput().model_dump(by_alias=True, exclude_none=True)
            await self._call(self._http.post(await self._service(chat), json=body))
        except (AdapterError, ConnectionLost) as exc:  # cosmetic
            log.debug("teams: no typing indicator: %s", exc)

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        """A small image inside a message (any chat); another file, in a personal chat only, offered
        with a file consent card (uploaded when the user accepts: `_file_consent`)."""
        chat = _joined(chat, thread)
        image = await asyncio.to_thread(self.files.inline_image, path)
        if image is not None:
            return await self._post(chat, MessageActivityInput(text=caption or None).add_attachments(image))
        if await asyncio.to_thread(self.store.get_state, f"teams:scope:{chat}") != "personal":
            raise AdapterError(
                "Teams takes a file from a bot only in a personal chat (group chats and channels keep "
                "files in SharePoint, reached only through Microsoft Graph, which this gateway does not use)"
            )
        card = await asyncio.to_thread(self.files.consent_card, path, caption)
        return await self._post(chat, MessageActivityInput().add_attachments(card))

    def _file_consent(self, invoke: FileConsentInvokeActivity) -> web.Response:
        """The user accepted or declined a consent card: answered at once (an invoke must be answered
        within seconds), the upload and the card's new text follow."""
        chat, card, answer = invoke.conversation.id, invoke.reply_to_id, invoke.value
        task = asyncio.create_task(self._settle_upload(chat, card, self.files.taken(answer.context), answer))
        self._uploads.add(task)
        task.add_done_callback(self._uploads.discard)
        return web.json_response({})

    async def _settle_upload(
        self, chat: str, card: str | None, offered: tuple[Path, str] | None, answer: FileConsentCardResponse
    ) -> None:
        info = answer.upload_info
        if offered is None:
            name = (info.name if info else None) or "That file"
            note = f"{name} is no longer here to send (the gateway restarted since it was offered)."
        elif answer.action != "accept" or info is None:
            offered[0].unlink(missing_ok=True)
            note = f"Not sent: {offered[1]} (declined)."
        else:
            try:
                sent = await self.files.upload(offered[0], info)
                await self._post(chat, MessageActivityInput().add_attachments(sent))
                note = f"Sent: {offered[1]}."
            except (AdapterError, ConnectionLost) as exc:
                log.warning("teams: %s not uploaded to %s: %s", offered[1], chat, exc)
                note = f"{offered[1]} could not be sent: {exc}"
        try:
            if card is not None:
                await self.edit(chat, card, note)
            else:
                await self._post(chat, MessageActivityInput(text=note))
        except (AdapterError, ConnectionLost) as exc:
            log.warning("teams: cannot say %r in %s: %s", note, chat, exc)

    async def fetch(self, attachment: Attachment) -> bytes:
        return await self.files.fetch(attachment)

    async def _call(self, call: Any) -> dict[str, Any]:
        """A connector call with its errors in the gateway's terms; the JSON it answered."""
        try:
            response = await call
        except httpx.HTTPStatusError as exc:
            status = exc.response.status_code
            if status == 429:
                raise RateLimited(float(exc.response.headers.get("Retry-After", "1") or 1)) from exc
            if status >= 500:
                raise ConnectionLost(f"Teams answered {status}") from exc
            raise AdapterError(f"Teams refused: {status} {exc.response.text[:200]}") from exc
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"Teams unreachable: {exc}") from exc
        return dict(response.json() or {}) if response.content else {}


def _joined(chat: str, thread: str | None) -> str:
    """The conversation id a delivery target named: Teams' ids hold colons (`a:1x…`, `19:…@thread.v2`),
    which a target's `platform:chat[:thread]` split apart; messages from Teams never carry a thread."""
    return chat if thread is None else f"{chat}:{thread}"
