"""WeCom (WeChat Work) through a self-built application in callback mode: WeCom POSTs each message,
encrypted, to the gateway's own listener; replies go out through the server API (wecom_api.py).

Every callback is checked and opened by wecom_crypto.py (msg_signature, AES key, receiveid = CorpID)
before anything in it is read; the XML, untrusted, is parsed with defusedxml. The GET that WeCom sends
when the callback URL is saved (`echostr`) is answered with its decrypted text. A POST is answered 200
only after its message was stored: WeCom retries a callback that fails (three times), and the stored
MsgId recognises a retry (an event, which has none, is known by its sender and CreateTime).

WeCom cannot edit a sent message: a reply is one message when done, split at 2,048 bytes; a text
message (message_format: text, the default) shows no markup, so the model's Markdown becomes plain
text (plain.py), while markdown messages carry it as it is. Approvals
are `button_interaction` template cards; a press comes back as a `template_card_event`, and the card's
buttons are then greyed out with the answer (update_template_card, with the press's response_code).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from xml.etree.ElementTree import Element, ParseError

from aiohttp import web
from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from ..config.chat import WeComSettings
from .base import Adapter, AdapterError, Attachment, Button, Deliver, Inbound
from .plain import to_plain
from .wecom_api import WeComApi
from .wecom_crypto import CallbackCipher, Refused
from .wecom_listener import open_callback, serve_callbacks

log = logging.getLogger("hermetic.gateway.wecom")
TEXT_LIMIT = 2048
"""Bytes (UTF-8) of one text or markdown message's content."""
TITLE_LIMIT = 36
"""Characters of a template card's main title."""
CARD_TEXT_LIMIT = 160
"""Characters of a card's sub_title_text kept on the card (a longer question goes out as text first)."""
LABEL_LIMIT = 10
"""Characters of a card button's text."""
MAX_BUTTONS = 6
MEDIA_NAMES = {"image": "image.jpg", "voice": "voice.amr", "video": "video.mp4", "file": "file.bin"}
"""Message types that carry a MediaId, and the name a file gets when the message gives none."""
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png"})


class WeComAdapter(Adapter):
    platform = "wecom"
    text_limit = TEXT_LIMIT
    streams = False

    @staticmethod
    def length(text: str) -> int:
        return len(text.encode())

    def __init__(self, settings: WeComSettings) -> None:
        self.settings = settings
        self.api = WeComApi(settings)
        self.cipher = CallbackCipher(
            settings.token.get_secret_value(), settings.encoding_aes_key.get_secret_value(), settings.corp_id
        )
        self._cards: dict[str, str] = {}
        """message id of a sent card -> the response_code that may update it once (72 hours)."""
        self._tasks: dict[str, str] = {}
        """task_id of a sent card -> its message id."""
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    @property
    def lock_name(self) -> str:
        return f"wecom:{self.settings.corp_id}:{self.settings.agent_id}"

    async def connect(self) -> None:
        await self.api.token()  # a wrong CorpID or Secret is refused here (AdapterError)

    async def disconnect(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.api.close()

    async def receive(self, deliver: Deliver) -> None:
        async def callback(request: web.Request) -> web.Response:
            return await self._callback(request, deliver)

        self._runner, self.port = await serve_callbacks(self.platform, self.settings, self.cipher, callback)
        await asyncio.Event().wait()

    async def _callback(self, request: web.Request, deliver: Deliver) -> web.Response:
        try:
            outer = _xml(await request.read())
            message = _xml(open_callback(self.cipher, request, _field(outer, "Encrypt")))
        except Refused as exc:
            log.warning("wecom: refused a callback: %s", exc)
            return web.Response(text=str(exc), status=403)
        except ValueError as exc:
            return web.Response(text=f"not a WeCom callback: {exc}", status=400)
        agent = _field(message, "AgentID")
        if agent and agent != str(self.settings.agent_id):
            log.warning(
                "wecom: a callback for application %s, not %s: ignored", agent, self.settings.agent_id
            )
            return web.Response(text="")
        inbound = self._inbound(message)
        if inbound is None:
            return web.Response(text="")  # an event or message kind the gateway does not answer
        try:
            await deliver(inbound)
        except Exception as exc:  # not stored: WeCom retries a callback that fails
            log.error("wecom: a message could not be stored: %s", exc)
            return web.Response(text="not stored", status=503)
        return web.Response(text="")

    def _inbound(self, message: Element) -> Inbound | None:
        user, kind = _field(message, "FromUserName"), _field(message, "MsgType")
        created = _field(message, "CreateTime")
        base = Inbound(platform=self.platform, chat=user, message_id="", user=user)
        if kind == "event":
            if _field(message, "Event") != "template_card_event":
                return None
            task, key = _field(message, "TaskId"), _field(message, "EventKey")
            code, card = _field(message, "ResponseCode"), self._tasks.get(task)
            if code and card is not None:
                self._cards[card] = code  # the press's code replaces the send's
            return base.model_copy(
                update={"message_id": f"card:{user}:{created}:{task}:{key}", "button": key}
            )
        message_id = _field(message, "MsgId") or f"{user}:{created}"
        if kind == "text":
            return base.model_copy(update={"message_id": message_id, "text": _field(message, "Content")})
        if kind in MEDIA_NAMES:
            media = _field(message, "MediaId")
            name = _field(message, "FileName") or f"{media[:16]}-{MEDIA_NAMES[kind]}"
            files = [Attachment(name=name, ref=media)]
            return base.model_copy(update={"message_id": message_id, "files": files})
        log.info("wecom: a %s message from %s is not answered", kind, user)
        return None

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        if buttons:
            return await self._card(chat, text, buttons)
        kind = self.settings.message_format
        content = to_plain(text) if kind == "text" else text  # a text message shows no markup
        return await self._message(chat, {"msgtype": kind, kind: {"content": content or " "}})

    async def _card(self, chat: str, text: str, buttons: list[Button]) -> str:
        """The buttons as a button_interaction card (a long question is sent as text before it)."""
        if len(to_plain(text)) > CARD_TEXT_LIMIT:
            await self.send(chat, text)
            text = "Choose an answer below."
        text = to_plain(text)  # a card shows no markup
        first = text.strip().splitlines()[0] if text.strip() else "Choose"
        title = first if len(first) <= TITLE_LIMIT else first[: TITLE_LIMIT - 1] + "…"
        task = f"hermetic-{uuid.uuid4().hex}"
        card = {
            "card_type": "button_interaction",
            "main_title": {"title": title},
            "sub_title_text": text,
            "task_id": task,
            "button_list": [
                {"text": b.label[:LABEL_LIMIT], "style": 1, "key": b.data} for b in buttons[:MAX_BUTTONS]
            ],
        }
        answer = await self.api.post(
            "message/send", self._addressed(chat, {"msgtype": "template_card", "template_card": card})
        )
        sent = str(answer.get("msgid", task))
        self._tasks[task] = sent
        if answer.get("response_code"):
            self._cards[sent] = str(answer["response_code"])
        return sent

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        """Only a card can change: its buttons greyed out, showing the text's last line (the answer)."""
        code = self._cards.pop(message_id, None)
        if code is None:
            raise AdapterError("WeCom cannot edit a sent message (only a card, once, with its response_code)")
        shown = text.strip().splitlines()[-1] if text.strip() else "done"
        update = {"userids": [chat], "agentid": self.settings.agent_id, "response_code": code}
        await self.api.post("message/update_template_card", update | {"button": {"replace_name": shown[:20]}})

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        kind = "image" if path.suffix.lower() in IMAGE_SUFFIXES else "file"
        uploaded = await self.api.call(
            "media/upload", params={"type": kind}, files={"media": (path.name, path.read_bytes())}
        )
        media = str(uploaded.json().get("media_id", ""))
        if not media:
            raise AdapterError(f"WeCom's media/upload answered no media_id for {path.name}")
        sent = await self._message(chat, {"msgtype": kind, kind: {"media_id": media}})
        if caption:
            await self.send(chat, caption)  # a file message has no caption of its own
        return sent

    async def fetch(self, attachment: Attachment) -> bytes:
        response = await self.api.call("media/get", params={"media_id": attachment.ref})
        return response.content

    async def _message(self, chat: str, body: dict[str, object]) -> str:
        answer = await self.api.post("message/send", self._addressed(chat, body))
        if chat in str(answer.get("invaliduser", "")).split("|"):
            raise AdapterError(f"WeCom does not know the user {chat} (or the app may not reach them)")
        return str(answer.get("msgid", ""))

    def _addressed(self, chat: str, body: dict[str, object]) -> dict[str, object]:
        return {"touser": chat, "agentid": self.settings.agent_id, **body}


def _xml(raw: bytes) -> Element:
    """Untrusted XML parsed without entities or DTDs. Raises ValueError."""
    try:
        root = fromstring(raw)
    except (ParseError, DefusedXmlException) as exc:
        raise ValueError(f"bad XML: {exc}") from exc
    if root.tag != "xml":
        raise ValueError(f"the root element is <{root.tag}>, not <xml>")
    return root


def _field(root: Element, name: str) -> str:
    found = root.find(name)
    return (found.text or "").strip() if found is not None else ""
