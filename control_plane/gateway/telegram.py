"""Telegram through python-telegram-bot's `Bot` (asyncio): long polling with getUpdates, the offset
persisted in the store, so updates sent while the gateway was down are answered on return; or, in
webhook mode, Telegram POSTing each update to the gateway's own listener. Replies go out as plain
text + entities converted from the model's Markdown by telegramify-markdown.

The Bot, not PTB's Application/Updater: the Updater acknowledges an update (the next getUpdates'
offset) on its own schedule, while the gateway must store each update first. Here the offset moves
past an update only after `deliver` has stored it. In webhook mode a POST is answered 200 only after
its update is stored (Telegram redelivers any other answer); the last SEEN_UPDATES update_ids, kept
in the store, recognise a redelivery (not a watermark: after a week without updates Telegram picks
the next id at random). setWebhook asks for one connection at a time (max_connections=1), so
updates are stored in the order Telegram sends them. On stop the webhook stays set: Telegram keeps what
arrives meanwhile and redelivers it when the gateway is back, just as after a kill -9, which could
delete nothing; polling mode deletes a webhook left set (getUpdates is refused while one is).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web
from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, MessageEntity, Update
from telegram.error import BadRequest, Forbidden, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.request import HTTPXRequest
from telegramify_markdown import convert

from ..config.chat import TelegramSettings
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound, RateLimited
from .listener import listen
from .ordered import each_in_order
from .text import utf16_length

UPDATES = ["message", "callback_query"]
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
MAX_BODY = 1_000_000
SEEN_UPDATES = 1000
CONNECTIONS = 256
"""Connections the Bot may hold open for its calls (sends, edits, typing), as PTB's ApplicationBuilder
gives it: a bare Bot's request object holds one, so every chat's calls queued behind each other (and
under load timed out waiting for it: "Pool timeout")."""
"""How many of the latest webhook update_ids are remembered to recognise a redelivery."""
log = logging.getLogger("hermetic.gateway.telegram")


class StateStore(Protocol):
    def get_state(self, key: str) -> str | None: ...
    def set_state(self, key: str, value: str) -> None: ...


class TelegramAdapter(Adapter):
    platform = "telegram"
    text_limit = 4096

    def __init__(self, settings: TelegramSettings, state: StateStore) -> None:
        self.settings = settings
        self.state = state
        token = settings.token.get_secret_value()
        self._name = "telegram:" + hashlib.sha256(token.encode()).hexdigest()[:16]
        self.bot = Bot(
            token,
            base_url=settings.base_url,
            base_file_url=settings.base_file_url,
            request=HTTPXRequest(connection_pool_size=CONNECTIONS),
        )
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        """The webhook listener's port (settings.port 0 picks a free one)."""

    @staticmethod
    def length(text: str) -> int:
        return utf16_length(text)

    @property
    def lock_name(self) -> str:
        return self._name

    async def connect(self) -> None:
        await _call(self.bot.initialize())  # getMe: proves the token
        if self.settings.mode == "polling":  # a webhook left set would make every getUpdates a 409
            await _call(self.bot.delete_webhook())

    async def disconnect(self) -> None:
        if self._runner is not None:  # the webhook itself stays set (the module's docstring says why)
            await self._runner.cleanup()
            self._runner = None
        with contextlib.suppress(TelegramError):  # already gone
            await self.bot.shutdown()

    async def receive(self, deliver: Deliver) -> None:
        if self.settings.mode == "webhook":
            return await self._serve_webhook(deliver)
        key = f"{self._name}:offset"
        offset = int(await asyncio.to_thread(self.state.get_state, key) or 0)  # all below it are stored
        while True:
            updates = await _call(
                self.bot.get_updates(
                    offset=offset or None,
                    timeout=self.settings.poll_timeout,
                    allowed_updates=UPDATES,
                    read_timeout=self.settings.poll_timeout + 10,
                )
            )
            # the batch's chats at once, each in order: one at a time, the last waited for every store
            await each_in_order([(_chat_of(u), partial(self._store, u, deliver)) for u in updates])
            if updates:  # the next getUpdates acknowledges the batch; a restart before it redelivers the
                # batch, whose stored messages are recognised by their ids
                offset = updates[-1].update_id + 1
                await asyncio.to_thread(self.state.set_state, key, str(offset))

    async def _store(self, update: Update, deliver: Deliver) -> None:
        message = _inbound(update)
        if message is not None:
            await deliver(message)
        if update.callback_query is not None:
            await self._settle(update.callback_query.id)

    def _secret(self) -> str:
        """The webhook's secret token: the configured one, else one generated once and kept."""
        if self.settings.webhook_secret is not None:
            return self.settings.webhook_secret.get_secret_value()
        key = f"{self._name}:webhook_secret"
        kept = self.state.get_state(key)
        if kept is None:
            kept = secrets.token_urlsafe(32)  # A-Z a-z 0-9 _ -, as the Bot API allows
            self.state.set_state(key, kept)
        return kept

    async def _serve_webhook(self, deliver: Deliver) -> None:
        secret = self._secret()
        one_at_a_time = asyncio.Lock()  # stored in the order they came, each seen list read-and-written whole

        async def handle(request: web.Request) -> web.Response:
            async with one_at_a_time:
                return await self._update(request, deliver, secret)

        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(self.settings.path, handle)
        self._runner, self.port = await listen(app, self.settings.host, self.settings.port)
        assert self.settings.webhook_url is not None  # the settings require it in webhook mode
        with _hidden(secret):
            await _call(
                self.bot.set_webhook(
                    self.settings.webhook_url,
                    allowed_updates=UPDATES,
                    secret_token=secret,
                    max_connections=1,
                    drop_pending_updates=False,  # what arrived while the gateway was down is answered
                )
            )
        log.info(
            "telegram: webhook set, listening on %s:%s%s", self.settings.host, self.port, self.settings.path
        )
        await asyncio.Event().wait()  # serve until cancelled

    async def _update(self, request: web.Request, deliver: Deliver, secret: str) -> web.Response:
        given = request.headers.get(SECRET_HEADER)
        if given is None:
            log.warning("telegram: refused a webhook POST without %s", SECRET_HEADER)
            return web.json_response({"error": f"missing {SECRET_HEADER}"}, status=401)
        if not hmac.compare_digest(given.encode(), secret.encode()):
            log.warning("telegram: refused a webhook POST with a wrong %s", SECRET_HEADER)
            return web.json_response({"error": f"wrong {SECRET_HEADER}"}, status=403)
        try:
            update = Update.de_json(await request.json(), self.bot)
        except Exception as exc:  # not JSON, or not an Update
            return web.json_response({"error": f"not an update: {exc}"}, status=400)
        key = f"{self._name}:webhook_seen"
        seen: list[int] = json.loads(self.state.get_state(key) or "[]")
        if update.update_id in seen:
            return web.json_response({"status": "duplicate"})  # stored before: a redelivery
        try:
            await self._store(update, deliver)
        except Exception:  # not stored: Telegram redelivers an update that was not answered 2xx
            log.exception("telegram: update %s could not be stored", update.update_id)
            return web.json_response({"error": "not stored"}, status=503)
        self.state.set_state(key, json.dumps([*seen, update.update_id][-SEEN_UPDATES:]))
        return web.json_response({"status": "stored"})

    async def _settle(self, query_id: str) -> None:
        """Stop the button's spinner in the user's app (best effort)."""
        with contextlib.suppress(TelegramError):
            await self.bot.answer_callback_query(query_id)

    def _formatted(self, markdown: str) -> tuple[str, list[MessageEntity]]:
        """The model's Markdown as Telegram's plain text + entities (telegramify-markdown); each part of
        a split reply is whole Markdown (fences reopened), so each converts on its own."""
        try:
            text, entities = convert(markdown)
        except Exception:  # a converter bug must not cost the reply: plain text then
            log.exception("telegram: cannot convert Markdown; sending it as it is")
            return markdown, []
        if not text.strip():
            return markdown, []
        return text, [MessageEntity.de_json(e.to_dict(), self.bot) for e in entities]

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        plain, entities = self._formatted(text)
        sent = await _call(
            self.bot.send_message(
                chat_id=chat,
                text=plain,
                entities=entities or None,
                message_thread_id=int(thread) if thread else None,
                reply_markup=_keyboard(buttons),
            )
        )
        return str(sent.message_id)

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        try:
            plain, entities = self._formatted(text)
            await _call(
                self.bot.edit_message_text(
                    text=plain,
                    entities=entities or None,
                    chat_id=chat,
                    message_id=int(message_id),
                    reply_markup=_keyboard(buttons),
                )
            )
        except AdapterError as exc:
            if "not modified" not in str(exc):  # the same text again is no failure
                raise

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        with path.open("rb") as handle:
            sent = await _call(
                self.bot.send_document(
                    chat_id=chat,
                    document=handle,
                    filename=path.name,
                    caption=caption or None,
                    message_thread_id=int(thread) if thread else None,
                )
            )
        return str(sent.message_id)

    async def fetch(self, attachment: Attachment) -> bytes:
        found = await _call(self.bot.get_file(attachment.ref))
        return bytes(await _call(found.download_as_bytearray()))

    async def typing(self, chat: str, *, thread: str | None = None) -> None:
        with contextlib.suppress(TelegramError):  # cosmetic
            await self.bot.send_chat_action(
                chat_id=chat, action="typing", message_thread_id=int(thread) if thread else None
            )


async def _call(call: Any) -> Any:
    """A Bot API call with its errors in the gateway's terms."""
    try:
        return await call
    except RetryAfter as exc:
        wait = exc.retry_after
        raise RateLimited(
            wait.total_seconds() if isinstance(wait, datetime.timedelta) else float(wait)
        ) from exc
    except (BadRequest, Forbidden, InvalidToken) as exc:
        raise AdapterError(f"Telegram refused: {exc.message}") from exc
    except NetworkError as exc:  # timeouts, 5xx, a dropped connection
        raise ConnectionLost(f"Telegram unreachable: {exc.message}") from exc
    except TelegramError as exc:  # Conflict (another poller), ...
        raise ConnectionLost(f"Telegram: {exc.message}") from exc


@contextlib.contextmanager
def _hidden(secret: str) -> Iterator[None]:
    """python-telegram-bot logs each call's parameters at DEBUG: not the call carrying the secret."""
    bot_log = logging.getLogger("telegram.Bot")

    def keep(record: logging.LogRecord) -> bool:
        return secret not in record.getMessage()

    bot_log.addFilter(keep)
    try:
        yield
    finally:
        bot_log.removeFilter(keep)


def _keyboard(buttons: list[Button] | None) -> InlineKeyboardMarkup | None:
    if not buttons:
        return None
    return InlineKeyboardMarkup([[InlineKeyboardButton(b.label, callback_data=b.data) for b in buttons]])


def _chat_of(update: Update) -> str:
    return str(update.effective_chat.id) if update.effective_chat else ""


def _inbound(update: Update) -> Inbound | None:
    """The platform-neutral message of an update; None for what the gateway does not handle."""
    query = update.callback_query
    if query is not None:
        where = query.message
        if where is None:
            return None
        return Inbound(
            platform="telegram",
            chat=str(where.chat.id),
            message_id=f"cb{query.id}",
            user=str(query.from_user.id),
            user_name=query.from_user.full_name,
            direct=where.chat.type == "private",
            button=query.data or "",
        )
    message = update.message
    if message is None or message.from_user is None:
        return None
    files: list[Attachment] = []
    if message.document is not None:
        document = message.document
        files.append(
            Attachment(name=document.file_name or "document", ref=document.file_id, size=document.file_size)
        )
    if message.photo:
        photo = message.photo[-1]  # the largest size
        files.append(
            Attachment(name=f"photo-{message.message_id}.jpg", ref=photo.file_id, size=photo.file_size)
        )
    return Inbound(
        platform="telegram",
        chat=str(message.chat.id),
        message_id=str(message.message_id),
        user=str(message.from_user.id),
        user_name=message.from_user.full_name,
        text=message.text or message.caption or "",
        direct=message.chat.type == "private",
        thread=str(message.message_thread_id)
        if message.is_topic_message and message.message_thread_id
        else None,
        files=files,
    )
