"""DingTalk through its Stream mode (dingtalk-stream, the official SDK): no public endpoint, the SDK
POSTs the app's credentials to /v1.0/gateway/connections/open, opens the WebSocket it is given, and
answers each CALLBACK frame with an ACK once the handler returned. Replies and files go out through
the OpenAPI (dingtalk_api.py).

A robot message (topic /v1.0/im/bot/messages/get) is ACKed only after it was stored: a handler that
raises sends no ACK and DingTalk pushes the frame again, and the stored msgId recognises a redelivery.
The SDK handles each frame in a task of its own; the gateway stores a chat's messages in the order
those tasks began (a lock per chat taken in arrival order, order.py). In a group DingTalk pushes only
messages that @mention the robot (isInAtList), and only those are taken.

A question's buttons are an interactive card (the configured template, callbackType STREAM): a press
arrives as a CALLBACK frame on /v1.0/card/instances/callback over the same authenticated connection,
and only data of a button this gateway put on that card is taken. Robot messages cannot be edited,
so a reply goes out whole when done (cards can: a question's card shows its outcome).

The SDK reads its host once, from DINGTALK_OPENAPI_ENDPOINT at import; the adapter sets the SDK's
connection URL from `api_base` instead (one DingTalk host per process). The SDK catches a task's
cancellation and reconnects; the adapter cancels it until it ends.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from dingtalk_stream import (
    AckMessage,
    CallbackHandler,
    CallbackMessage,
    ChatbotMessage,
    Credential,
    DingTalkStreamClient,
)
from dingtalk_stream.card_callback import Card_Callback_Router_Topic

from ..config.chat import DingTalkSettings
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound
from .dingtalk_api import DingTalkApi, is_group
from .files import download
from .text import FENCE

log = logging.getLogger("hermetic.gateway.dingtalk")
TEXT_LIMIT = 5000
"""UTF-8 bytes of one markdown message's text, as sent (DingTalk gives no figure for robot messages;
its custom robots take 20000 bytes a request, a markdown text of 5000 renders whole)."""


class DingTalkAdapter(Adapter):
    platform = "dingtalk"
    text_limit = TEXT_LIMIT
    streams = False

    def __init__(self, settings: DingTalkSettings) -> None:
        self.settings = settings
        self.buttons = settings.card_template_id is not None
        self.api = DingTalkApi(settings)
        secret = settings.client_secret.get_secret_value()
        self.client = _Client(Credential(settings.client_id, secret), log)
        opening = f"{settings.api_base.rstrip('/')}/v1.0/gateway/connections/open"
        DingTalkStreamClient.OPEN_CONNECTION_API = opening  # the SDK reads the class's, not the instance's
        self._cards: dict[str, tuple[str, set[str]]] = {}
        """outTrackId -> the chat of a card sent, and its buttons' data (a press of other data is refused)."""

    @staticmethod
    def length(text: str) -> int:
        return len(to_markdown(text).encode())

    @property
    def lock_name(self) -> str:
        return f"dingtalk:{self.settings.client_id}"

    async def connect(self) -> None:
        await self.api.token()  # checks client_id and client_secret

    async def disconnect(self) -> None:
        await self.api.close()

    async def receive(self, deliver: Deliver) -> None:
        async def take(message: Inbound | None) -> None:
            if message is not None:  # the gateway stores a chat's frames in the order their tasks began
                await deliver(message)

        def on_message(data: dict[str, Any]) -> Awaitable[None]:
            try:
                message = _inbound(ChatbotMessage.from_dict(data))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise _Malformed(f"not a robot message: {exc!r}") from exc
            return take(message)

        def on_card(data: dict[str, Any]) -> Awaitable[None]:
            return take(self._pressed(data))

        self.client.register_callback_handler(ChatbotMessage.TOPIC, _Handler(on_message))
        self.client.register_callback_handler(Card_Callback_Router_Topic, _Handler(on_card))
        runner = asyncio.create_task(self.client.start())  # reconnects by itself
        try:
            await asyncio.wait([runner])
            raise ConnectionLost("the DingTalk stream ended")
        finally:
            while not runner.done():  # the SDK catches a cancellation (and sleeps, then reconnects)
                runner.cancel()
                await asyncio.wait([runner], timeout=1)

    def _pressed(self, data: dict[str, Any]) -> Inbound | None:
        track = str(data.get("outTrackId", ""))
        try:
            content = json.loads(data.get("content") or "{}")
            value = str(((content.get("cardPrivateData") or {}).get("params") or {}).get("data", ""))
        except (ValueError, AttributeError):
            value = ""
        chat, issued = self._cards.get(track, ("", set()))
        if value not in issued:
            log.warning("dingtalk: refused a card callback for data this gateway did not put on %r", track)
            return None
        user = str(data.get("userId", ""))
        return Inbound(
            platform=self.platform, chat=chat, message_id=f"card:{track}:{value}", user=user,
            direct=not is_group(chat), button=value,
        )  # fmt: skip

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        if buttons and self.settings.card_template_id:
            track = f"hermetic-{uuid.uuid4().hex}"
            self._cards[track] = (chat, {b.data for b in buttons})
            await self.api.send_card(chat, track, _card(text, buttons))
            return f"card:{track}"
        return await self.api.send(chat, "sampleMarkdown", {"title": _title(text), "text": to_markdown(text)})

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        if not message_id.startswith("card:"):
            raise AdapterError("DingTalk robot messages cannot be edited")
        track = message_id.removeprefix("card:")
        if buttons:
            self._cards[track] = (chat, {b.data for b in buttons})
        else:  # answered: no press of it is taken any more
            self._cards.pop(track, None)
        await self.api.update_card(track, _card(text, buttons or []))

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        media = await self.api.upload(path)
        kind = path.suffix.lstrip(".").lower() or "file"
        file = {"mediaId": media, "fileName": path.name, "fileType": kind}
        sent = await self.api.send(chat, "sampleFile", file)
        if caption:
            await self.send(chat, caption)
        return sent

    async def fetch(self, attachment: Attachment) -> bytes:
        """Read from the URL DingTalk gives for it, no more than max_file_bytes (no token goes there)."""
        url = await self.api.download_url(attachment.ref)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            return await download(session, url, self.settings.max_file_bytes, attachment.name)


class _Client(DingTalkStreamClient):
    def get_host_ip(self) -> str:
        """The SDK finds its address by routing a UDP socket toward 8.8.8.8; DingTalk only logs it."""
        return ""


class _Malformed(ValueError):
    """A frame that is no message of its topic: ACKed as a bad request (pushing it again cannot help)."""


class _Handler(CallbackHandler):
    """One topic's frames to `take`; it raising sends no ACK (the SDK logs it), so DingTalk redelivers."""

    def __init__(self, take: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        super().__init__()
        self._take = take

    async def process(self, message: CallbackMessage) -> tuple[int, str]:
        try:
            if not isinstance(message.data, dict):
                raise _Malformed("not a JSON object")
            await self._take(message.data)
        except _Malformed as exc:
            log.warning("dingtalk: refused a %s frame: %s", message.headers.topic, exc)
            return AckMessage.STATUS_BAD_REQUEST, str(exc)
        return AckMessage.STATUS_OK, "OK"


def _inbound(msg: ChatbotMessage) -> Inbound | None:
    """A user's robot message; None for a group message that does not @mention the robot."""
    if not msg.message_id:
        raise _Malformed("no msgId")
    group = msg.conversation_type == "2"
    if group and not msg.is_in_at_list:
        return None
    user = str(msg.sender_staff_id or msg.sender_id or "")
    content = msg.extensions.get("content") if isinstance(msg.extensions.get("content"), dict) else {}
    files: list[Attachment] = []
    text = msg.text.content if msg.text is not None else ""
    if msg.message_type == "file" and content.get("downloadCode"):
        name = str(content.get("fileName") or "file")
        files.append(Attachment(name=name, ref=str(content["downloadCode"])))
    elif msg.message_type == "picture" and msg.image_content is not None and msg.image_content.download_code:
        files.append(Attachment(name="picture.png", ref=msg.image_content.download_code))
    elif msg.message_type == "richText" and msg.rich_text_content is not None:
        for item in msg.rich_text_content.rich_text_list:
            text += str(item.get("text", ""))
            if item.get("downloadCode"):
                files.append(Attachment(name=f"picture-{len(files) + 1}.png", ref=str(item["downloadCode"])))
    return Inbound(
        platform="dingtalk",
        chat=str(msg.conversation_id) if group else user,
        message_id=str(msg.message_id or ""),
        user=user,
        user_name=str(msg.sender_nick or ""),
        text=text.strip(),
        direct=not group,
        files=files,
    )


def _card(text: str, buttons: list[Button]) -> dict[str, str]:
    """The template's variables (DingTalk takes strings only): the markdown and the buttons as JSON."""
    choices = [{"label": b.label, "data": b.data} for b in buttons]
    return {"markdown": to_markdown(text), "buttons": json.dumps(choices, ensure_ascii=False)}


def _title(text: str) -> str:
    """A markdown message's title: what the notification and the chat list show."""
    first = next((line for line in text.splitlines() if line.strip()), "") or "Reply"
    return re.sub(r"[#*_`>]+", "", first).strip()[:40] or "Reply"


def to_markdown(text: str) -> str:
    """The model's Markdown in DingTalk's dialect: a line break there needs two trailing spaces (or a
    blank line), ~~strike~~ is not rendered (its text stays); code blocks pass unchanged."""
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            out.append(line)
        elif fenced or not line.strip():
            out.append(line)
        else:
            out.append(re.sub(r"~~(.+?)~~", r"\1", line).rstrip() + "  ")
    return "\n".join(out)
