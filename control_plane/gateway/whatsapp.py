"""WhatsApp through the Cloud API with pywa (its asyncio client, pywa_async): the webhook in, served by
the gateway's own listener, and the Graph API out.

Each POST's X-Hub-Signature-256 (HMAC-SHA256 of the body under the app secret) is checked by pywa
before anything is read. The POST is answered 200 only after its messages were stored: WhatsApp
redelivers a webhook that fails, and the stored message id (`wamid...`) recognises the redelivery
(pywa's own in-memory duplicate skipping is off: it would answer a redelivery of a failed store 200).

WhatsApp cannot edit a message: a reply is one message when done, after a typing indicator; the model's
Markdown becomes WhatsApp's *bold* _italic_ ~strike~ (py-whatsapp-formatter). A question's choices
are reply buttons, or a list message when there are more than three. Outside
the 24-hour customer-service window only a template may be sent; when a reply is refused for that
(error 131047), the configured template tells the user an answer waits and that writing reopens the
chat. pywa sets the Graph API host on the httpx client it is given; the adapter sets that client's
`base_url` to `api_base` afterwards (for the suite's stand-in), which is httpx's, not pywa's logic.

Groups (the Cloud API's Groups API): a group's messages come with its `group_id`, which is then the chat
(replies go to it, `recipient_type: group`); the bot answers a group message only when it is addressed,
by a mention of its number (`@15550001111`) or a reply to one of its messages. Groups take text, media and
templates but no interactive messages, so a question there lists its choices and is answered by a reply.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import mimetypes
import re
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from pywa_async import WhatsApp
from pywa_async.errors import ReEngagementMessage, ThrottlingError, WhatsAppError
from pywa_async.handlers import CallbackButtonHandler, CallbackSelectionHandler, MessageHandler
from pywa_async.types import Button as WaButton
from pywa_async.types import CallbackButton, CallbackSelection, Message, Section, SectionList, SectionRow
from pywa_async.types.chat import ChatType
from pywa_async.types.templates import TemplateLanguage
from whatsapp_formatter import convert_markdown_to_whatsapp

from ..config.chat import WhatsAppSettings
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound, RateLimited
from .files import TooLarge
from .latest import LatestInbound
from .listener import listen
from .records import GatewayStore

log = logging.getLogger("hermetic.gateway.whatsapp")
TEXT_LIMIT = 4096
"""Characters of one text message's body."""
BUTTON_BODY_LIMIT = 1024
"""Characters of an interactive message's body (at most three reply buttons, titles of 20)."""
IMAGE_TYPES = {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png"}
"""The images WhatsApp shows in the chat (image messages: JPEG and PNG, up to IMAGE_LIMIT bytes)."""
IMAGE_LIMIT = 5 * 1024 * 1024
MAX_REPLY_BUTTONS = 3
"""Reply buttons one message may have: more choices go as a list message."""
_failed: contextvars.ContextVar[list[Exception]] = contextvars.ContextVar("whatsapp_failed")


class WhatsAppAdapter(Adapter):
    platform = "whatsapp"
    text_limit = TEXT_LIMIT
    streams = False

    def __init__(self, settings: WhatsAppSettings, store: GatewayStore) -> None:
        self.settings = settings
        self._session = httpx.AsyncClient(timeout=30)
        self.wa = WhatsApp(
            phone_id=settings.phone_id,
            token=settings.token.get_secret_value(),
            session=self._session,
            verify_token=settings.verify_token.get_secret_value(),
            app_secret=settings.app_secret.get_secret_value(),
            skip_duplicate_updates=False,
            validate_updates=True,
        )
        version = str(self._session.base_url).rstrip("/").rsplit("/", 1)[-1]  # "v25.0", as pywa chose
        self._session.base_url = f"{settings.api_base.rstrip('/')}/{version}"
        self._latest = LatestInbound(store, self.platform)
        """the typing indicator marks a chat's latest stored message read"""
        """chat -> the id of its latest message (a typing indicator is shown on one)."""
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self._number = ""
        """The business's phone number, digits only: how group members mention it (set at connect)."""
        self._mention = re.compile("(?!)")

    @property
    def lock_name(self) -> str:
        return f"whatsapp:{self.settings.phone_id}"

    def buttons_in(self, message: Inbound) -> bool:
        return message.direct  # groups take no interactive messages

    async def connect(self) -> None:
        try:
            number = await self.wa.get_business_phone_number()
            self._number = re.sub(r"\D", "", number.display_phone_number or "")
            if self._number:  # else no mention can be told apart: only replies to the bot address it
                self._mention = re.compile(rf"(?<![\w@])@\+?{self._number}(?!\d)")
        except WhatsAppError as exc:
            raise AdapterError(f"WhatsApp refused the token: {exc}") from exc
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"WhatsApp unreachable: {exc}") from exc

    async def disconnect(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def receive(self, deliver: Deliver) -> None:
        async def store(inbound: Inbound) -> None:
            try:
                await deliver(inbound)
                self._latest.stored(inbound.chat, inbound.message_id)
            except Exception as exc:  # pywa logs and swallows a handler's error: the POST must fail
                _failed.get().append(exc)

        async def on_message(_: Any, msg: Message) -> None:
            inbound = self._inbound(msg)
            if inbound is not None:
                await store(inbound)

        async def on_button(_: Any, press: CallbackButton | CallbackSelection) -> None:
            user = str(press.from_user.preferred_id)
            await store(Inbound(platform=self.platform, chat=user, message_id=press.id, user=user,
                                user_name=press.from_user.name or "", button=str(press.data)))  # fmt: skip

        self.wa.add_handlers(
            MessageHandler(on_message), CallbackButtonHandler(on_button), CallbackSelectionHandler(on_button)
        )
        app = web.Application(client_max_size=1_000_000)
        app.router.add_get(self.settings.path, self._challenge)
        app.router.add_post(self.settings.path, self._update)
        self._runner, self.port = await listen(app, self.settings.host, self.settings.port)
        await asyncio.Event().wait()

    async def _challenge(self, request: web.Request) -> web.Response:
        """The subscription check: hub.challenge echoed when hub.verify_token matches."""
        text, status = await self.wa.webhook_challenge_handler(
            vt=request.query.get("hub.verify_token", ""), ch=request.query.get("hub.challenge", "")
        )
        return web.Response(text=text, status=status)

    async def _update(self, request: web.Request) -> web.Response:
        body = await request.read()
        refused = await self.wa.webhook_update_validator(body, request.headers.get("X-Hub-Signature-256", ""))
        if refused:
            log.warning("refused a webhook POST: %s", refused[0])
            return web.Response(text=refused[0], status=refused[1])
        failed: list[Exception] = []
        token = _failed.set(failed)
        try:
            text, status = await self.wa.webhook_update_handler(body)
        finally:
            _failed.reset(token)
        if failed:  # not stored: WhatsApp redelivers a failed webhook
            log.error("whatsapp: a message could not be stored: %s", failed[0])
            return web.Response(text="not stored", status=503)
        return web.Response(text=text, status=status)

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        choices = _choices(buttons or [])
        formatted = convert_markdown_to_whatsapp(text) if text else " "
        if len(formatted) > (BUTTON_BODY_LIMIT if choices else TEXT_LIMIT):  # cut for the source's length
            formatted = text
        sent = await self._call(self.wa.send_message(to=chat, text=formatted, buttons=choices), chat)
        return str(sent.id)

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        raise AdapterError("WhatsApp messages cannot be edited")  # never asked: streams is False

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        """A JPEG or PNG of up to 5 MB as an image (shown in the chat), any other file as a document."""
        kind, said = IMAGE_TYPES.get(path.suffix.lower()), caption or None
        if kind is not None and path.stat().st_size <= IMAGE_LIMIT:
            sending = self.wa.send_image(to=chat, image=path, caption=said, mime_type=kind)
        else:
            sending = self.wa.send_document(to=chat, document=path, filename=path.name, caption=said)
        return str((await self._call(sending, chat)).id)

    async def fetch(self, attachment: Attachment) -> bytes:
        try:
            found = await self.wa.get_media_url(attachment.ref)
            if found.file_size > self.settings.max_file_bytes:  # said before it is downloaded
                raise TooLarge(attachment.name, self.settings.max_file_bytes)
            return await self.wa.get_media_bytes(found.url)
        except WhatsAppError as exc:
            raise AdapterError(f"WhatsApp refused the file: {exc}") from exc
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"WhatsApp unreachable: {exc}") from exc

    async def typing(self, chat: str, *, thread: str | None = None) -> None:
        latest = await self._latest.get(chat)
        if latest is not None:
            try:
                await self.wa.indicate_typing(latest)
            except (WhatsAppError, httpx.HTTPError) as exc:  # cosmetic
                log.debug("whatsapp: no typing indicator: %s", exc)

    def _inbound(self, msg: Message) -> Inbound | None:
        """The message as the gateway takes it; None for a group message not addressed to the bot."""
        media = msg.document or msg.image or msg.video or msg.audio or msg.sticker  # a voice note is audio
        files = []
        if media is not None:
            kind = (media.mime_type or "").split(";")[0].strip()  # "audio/ogg; codecs=opus"
            extension = ".ogg" if kind == "audio/ogg" else mimetypes.guess_extension(kind) or ".bin"
            name = getattr(media, "filename", None) or f"{media.id}{extension}"
            files.append(Attachment(name=name, ref=str(media.id)))
        user = str(msg.from_user.preferred_id)
        text = msg.text or getattr(media, "caption", None) or ""
        group = msg.chat.type == ChatType.GROUP
        if group:
            replied = msg.reply_to_message is not None and msg.reply_to_message.from_user_id == self._number
            if not (replied or self._mention.search(text)):
                return None
            text = self._mention.sub("", text).strip()
        return Inbound(
            platform=self.platform,
            chat=msg.chat.id if group else user,
            message_id=msg.id,
            user=user,
            user_name=msg.from_user.name or "",
            text=text,
            direct=not group,
            files=files,
        )

    async def _call(self, call: Any, chat: str) -> Any:
        """A send, with its errors in the gateway's terms; outside the 24-hour window the template."""
        try:
            return await call
        except ReEngagementMessage as exc:
            await self._window_closed(chat)
            raise AdapterError("the 24-hour window is closed: the user was sent the template") from exc
        except ThrottlingError as exc:
            raise RateLimited(1.0) from exc
        except WhatsAppError as exc:
            if (exc.status_code or 0) >= 500:
                raise ConnectionLost(f"WhatsApp answered {exc.status_code}") from exc
            raise AdapterError(f"WhatsApp refused: {exc}") from exc
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"WhatsApp unreachable: {exc}") from exc

    async def _window_closed(self, chat: str) -> None:
        try:
            await self.wa.send_template(
                to=chat,
                name=self.settings.window_template,
                language=TemplateLanguage(self.settings.window_template_language),
            )
        except (WhatsAppError, httpx.HTTPError) as exc:
            log.error("whatsapp: the window-closed template to %s failed: %s", chat, exc)


def _choices(buttons: list[Button]) -> list[WaButton] | SectionList | None:
    """Up to three choices as reply buttons (titles of 20); more as a list message (up to ten rows,
    titles of 24), whose chosen row comes back like a press."""
    if len(buttons) <= MAX_REPLY_BUTTONS:
        return [WaButton(title=b.label[:20], callback_data=b.data) for b in buttons] or None
    rows = [SectionRow(title=b.label[:24], callback_data=b.data) for b in buttons]
    return SectionList(button_title="Choose", sections=[Section(title="Answers", rows=rows)])
