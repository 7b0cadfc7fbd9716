"""Feishu / Lark through the official SDK (lark-oapi): events over its long connection (a WebSocket the
SDK opens to the platform, so no public endpoint); replies, cards and files through the REST API
(feishu_api.py). `domain` picks open.feishu.cn or open.larksuite.com.

An event is answered only after the handler returned: the message is stored by then. A handler that
raises is answered 500, and Feishu pushes the event again; the stored message_id recognises it. The
SDK's handlers are synchronous and its ws client runs its own event loop, so it runs in a thread of its
own, and each handler blocks that thread until the gateway's loop has stored the message: events are
stored one at a time in the order they arrived, so a chat's messages are answered in order.

A reply is an interactive card (JSON 2.0, one markdown element) that streams by PATCH edits; a
question's buttons are on the card, and a press (card.action.trigger, a callback over the same long
connection) is taken only for data this gateway put on that card. In a group only a message that
@mentions the bot is taken.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from pathlib import Path
from typing import Any

import lark_oapi as lark
import lark_oapi.ws.client as ws_client
from lark_oapi.event.callback.model.p2_card_action_trigger import P2CardActionTriggerResponse
from lark_oapi.ws.exception import ClientException

from ..config.chat import FeishuSettings
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound
from .feishu_api import FeishuApi
from .text import FENCE

log = logging.getLogger("hermetic.gateway.feishu")
logging.getLogger("Lark").handlers.clear()  # the SDK's own handler prints to stdout: its lines go with ours
TEXT_LIMIT = 28_000
"""Bytes of a reply's markdown as it travels (JSON in a JSON body): Feishu takes 30 KB of a card's
request body, and the rest of the card needs well under 2 KB."""
STORE_TIMEOUT = 60.0
"""Seconds an event's handler waits for the message to be stored; then it fails (answered 500)."""
_INLINE_CODE = re.compile(r"(`+)(?:.+?)\1")
_QUOTE = re.compile(r"^\s*(?:>\s?)+")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
"""Control characters JSON writes as \\u00XX (newline, tab and return have their own escapes)."""


class FeishuAdapter(Adapter):
    platform = "feishu"
    text_limit = TEXT_LIMIT

    def __init__(self, settings: FeishuSettings) -> None:
        self.settings = settings
        self.api = FeishuApi(settings)
        self.bot = ""
        """The bot's open id, as mentions name it."""
        self._cards: dict[str, tuple[str, str | None, set[str]]] = {}
        """message id -> the chat (and thread) of a card with buttons, and its buttons' data."""
        self._sending: dict[str, tuple[str, str | None]] = {}
        """a button's data -> the chat (and thread) of its card while the card is sent: a press can come
        over the long connection before Feishu's answer names the card's message id."""
        self._direct: dict[str, bool] = {}
        """chat id -> whether it is a 1:1 chat, as its messages said (a card's callback does not)."""

    @staticmethod
    def length(text: str) -> int:
        """At least the bytes the text takes in the request: UTF-8, `<` and `>` as entities, and escaped
        twice for JSON (the card is a JSON string in the JSON body). Counted, not built: the gateway
        measures a streaming reply at each token."""
        escaped = sum(text.count(c) for c in "\n\t\r")
        grown = 3 * sum(text.count(c) for c in '<>"\\') + 2 * escaped + 6 * len(_CONTROL.findall(text))
        return len(text.encode()) + grown

    @property
    def lock_name(self) -> str:
        return f"feishu:{self.settings.app_id}"

    async def connect(self) -> None:
        self.bot = await self.api.bot_open_id()  # checks app_id and app_secret on the way

    async def disconnect(self) -> None:
        await self.api.close()

    async def receive(self, deliver: Deliver) -> None:
        gateway = asyncio.get_running_loop()

        async def store(message: Inbound) -> None:
            await deliver(message)

        def take(message: Inbound | None) -> None:
            """In the SDK's thread: the message stored on the gateway's loop before the event is answered."""
            if message is not None:
                asyncio.run_coroutine_threadsafe(store(message), gateway).result(STORE_TIMEOUT)

        def on_message(data: Any) -> None:
            take(self._message(data))

        def on_press(data: Any) -> P2CardActionTriggerResponse:
            take(self._pressed(data))
            return P2CardActionTriggerResponse({})

        handler = (
            lark.EventDispatcherHandler.builder("", "").register_p2_im_message_receive_v1(on_message)
            .register_p2_card_action_trigger(on_press).build()
        )  # fmt: skip
        connection = _LongConnection(self.settings, handler)
        ended: asyncio.Future[None] = gateway.create_future()
        thread = threading.Thread(target=connection.run, args=(gateway, ended), name="feishu-ws", daemon=True)
        thread.start()
        try:
            await asyncio.shield(ended)
            raise ConnectionLost("the Feishu long connection ended")
        finally:
            connection.stop()
            await asyncio.wait([ended], timeout=30)

    def _message(self, data: Any) -> Inbound | None:
        try:
            message = _inbound(data.event, self.bot)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:  # pushing it again cannot help
            log.warning("feishu: refused a message event: %r", exc)
            return None
        if message is not None:
            self._direct[message.chat] = message.direct
        return message

    def _pressed(self, data: Any) -> Inbound | None:
        event = data.event
        message_id = str(getattr(event.context, "open_message_id", "") or "")
        value = (getattr(event.action, "value", None) or {}) if event.action is not None else {}
        pressed = str(value.get("data", "")) if isinstance(value, dict) else ""
        chat, thread, issued = self._cards.get(message_id, ("", None, set()))
        sending = self._sending.get(pressed)
        in_chat = getattr(event.context, "open_chat_id", None)
        if pressed not in issued and sending is not None and sending[0] == in_chat:
            (chat, thread), issued = sending, {pressed}
        if pressed not in issued:
            log.warning("feishu: refused a card callback for data this gateway did not put on %r", message_id)
            return None
        user = str(getattr(event.operator, "open_id", "") or "")
        return Inbound(
            platform=self.platform, chat=chat, message_id=f"card:{message_id}:{pressed}", user=user,
            direct=self._direct.get(chat, False), thread=thread, button=pressed,
        )  # fmt: skip

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        data = [b.data for b in buttons or []]
        self._sending.update((d, (chat, thread)) for d in data)
        try:
            sent = await self.api.send(chat, "interactive", _card(text, buttons or []), thread=thread)
            self._issued(chat, thread, sent, buttons)
        finally:
            for d in data:
                self._sending.pop(d, None)
        return sent

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        self._issued(chat, self._cards.get(message_id, ("", None))[1], message_id, buttons)
        await self.api.patch(message_id, _card(text, buttons or []))

    def _issued(self, chat: str, thread: str | None, message_id: str, buttons: list[Button] | None) -> None:
        """A card's buttons noted (a press of other data is refused); none: no press of it is taken."""
        if buttons:
            self._cards[message_id] = (chat, thread, {b.data for b in buttons})
        else:
            self._cards.pop(message_id, None)

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        kind, content = await self.api.upload(path)
        sent = await self.api.send(chat, kind, content, thread=thread)
        if caption:
            await self.send(chat, caption, thread=thread)
        return sent

    async def fetch(self, attachment: Attachment) -> bytes:
        message_id, kind, key = attachment.ref.split("/", 2)
        return await self.api.download(message_id, key, kind)


class _LongConnection:
    """The SDK's ws.Client on an event loop of its own thread. Every method of that client schedules on
    its module's `loop` (set at import), and `start()` never returns: the module's loop is set to this
    thread's before it starts, and stopping cancels what runs there, then closes the socket."""

    def __init__(self, settings: FeishuSettings, handler: lark.EventDispatcherHandler) -> None:
        secret = settings.app_secret.get_secret_value()
        self.client = lark.ws.Client(
            settings.app_id, secret, log_level=lark.LogLevel.WARNING, event_handler=handler,
            domain=settings.base_url,
        )  # fmt: skip
        self.loop = asyncio.new_event_loop()

    def run(self, gateway: asyncio.AbstractEventLoop, ended: asyncio.Future[None]) -> None:
        asyncio.set_event_loop(self.loop)
        ws_client.loop = self.loop
        outcome: BaseException | None = None
        try:
            self.client.start()  # connects (reconnecting by itself), then runs until cancelled
        except asyncio.CancelledError:
            pass
        except ClientException as exc:
            outcome = AdapterError(f"Feishu refused the long connection: {exc}")
        except Exception as exc:
            outcome = ConnectionLost(f"the Feishu long connection failed: {exc!r}")
        finally:
            self._end()
            gateway.call_soon_threadsafe(_settle, ended, outcome)

    def stop(self) -> None:
        """From the gateway's loop: end what runs on this one (start() then raises CancelledError)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(_cancel_all, self.loop)

    def _end(self) -> None:
        _cancel_all(self.loop)
        for _ in range(5):  # a task may catch a cancellation once (the SDK's ping loop sleeps in a finally)
            pending = [task for task in asyncio.all_tasks(self.loop) if not task.done()]
            if not pending:
                break
            for task in pending:
                task.cancel()
            self.loop.run_until_complete(asyncio.wait(pending, timeout=1))
        self.loop.run_until_complete(self.client._disconnect())  # the SDK has no public stop
        self.loop.close()


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()


def _settle(ended: asyncio.Future[None], outcome: BaseException | None) -> None:
    if ended.done():
        return
    if outcome is None:
        ended.set_result(None)
    else:
        ended.set_exception(outcome)


def _inbound(event: Any, bot: str) -> Inbound | None:
    """A user's message; None for another app's, or a group message that does not @mention the bot."""
    message, sender = event.message, event.sender
    if sender is None or sender.sender_type != "user":
        return None
    mentions = message.mentions or []
    group = message.chat_type != "p2p"
    if group and not any(m.id is not None and m.id.open_id == bot for m in mentions):
        return None
    content = json.loads(message.content or "{}")
    text, files = _content(str(message.message_type), content, str(message.message_id))
    for mention in mentions:  # @_user_1 placeholders: the bot's taken out, others by name
        name = "" if mention.id is not None and mention.id.open_id == bot else f"@{mention.name}"
        text = text.replace(str(mention.key), name)
    return Inbound(
        platform="feishu",
        chat=str(message.chat_id),
        message_id=str(message.message_id),
        user=str(sender.sender_id.open_id),
        text=re.sub(r"[ \t]{2,}", " ", text).strip(),
        direct=not group,
        thread=str(message.root_id) if message.thread_id else None,
        files=files,
    )


def _content(kind: str, content: dict[str, Any], message_id: str) -> tuple[str, list[Attachment]]:
    """A message's text and files by its type (text, post, image, file, audio, media)."""
    if kind == "text":
        return str(content.get("text", "")), []
    if kind in ("file", "audio", "media"):
        name = str(content.get("file_name") or f"{kind}.{'opus' if kind == 'audio' else 'bin'}")
        return "", [Attachment(name=name, ref=f"{message_id}/file/{content['file_key']}")]
    if kind == "image":
        return "", [Attachment(name="image.png", ref=f"{message_id}/image/{content['image_key']}")]
    if kind == "post":
        lines, files = [str(content.get("title") or "")], list[Attachment]()
        for paragraph in content.get("content") or []:
            line = ""
            for item in paragraph:
                tag = item.get("tag")
                if tag in ("text", "a", "code_block"):
                    line += str(item.get("text", ""))
                elif tag == "at":
                    line += str(item.get("user_id", ""))
                elif tag == "img":
                    name = f"image-{len(files) + 1}.png"
                    files.append(Attachment(name=name, ref=f"{message_id}/image/{item['image_key']}"))
                elif tag == "media":
                    files.append(Attachment(name="video.mp4", ref=f"{message_id}/file/{item['file_key']}"))
            lines.append(line)
        return "\n".join(line for line in lines if line), files
    return "", []


def _card(text: str, buttons: list[Button]) -> dict[str, Any]:
    """A card (JSON 2.0: shared, so PATCH updates it for everyone) with the text and the buttons."""
    elements: list[dict[str, Any]] = [{"tag": "markdown", "content": to_markdown(text)}]
    if buttons:
        styles = {"approve": "primary_filled", "deny": "danger", "neutral": "default"}
        columns = [
            {"tag": "column", "width": "auto", "elements": [{
                "tag": "button", "text": {"tag": "plain_text", "content": b.label}, "type": styles[b.tone],
                "behaviors": [{"type": "callback", "value": {"data": b.data}}],
            }]}
            for b in buttons
        ]  # fmt: skip
        elements.append({"tag": "column_set", "flex_mode": "flow", "columns": columns})
    return {"schema": "2.0", "config": {"update_multi": True}, "body": {"elements": elements}}


def to_markdown(text: str) -> str:
    """The model's Markdown for a card's markdown element: `<` and `>` would open the card's own tags
    there (<at id=all>, <font>, <a>), so outside code they are written as entities (a line's leading `>`
    quote marker stays); everything else, code blocks included, passes unchanged."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        if fenced or FENCE.match(line):
            out.append(line)
            continue
        quote = _QUOTE.match(line)
        start = quote.end() if quote else 0
        rest, pieces, at = line[start:], [line[:start]], 0
        for code in _INLINE_CODE.finditer(rest):
            pieces += [_escape(rest[at : code.start()]), code.group(0)]
            at = code.end()
        out.append("".join([*pieces, _escape(rest[at:])]))
    return "\n".join(out)


def _escape(text: str) -> str:
    return text.replace("<", "&lt;").replace(">", "&gt;")
