"""What the WeCom robot adapter (wecom_bot.py) reads from and writes into its JSON callbacks: the inbound
message (its text with the mention removed, its quote, its image and file URLs), one reply's stream, and
the button cards; written from the published reference (developer.work.weixin.qq.com/document/path/100719,
101031, 101138)."""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from .base import Attachment, Button, Inbound
from .plain import to_plain

TITLE_LIMIT = 36
"""Characters of a card's main title."""
LABEL_LIMIT = 10
"""Characters of a card button's text (WeCom suggests no more)."""
MAX_BUTTONS = 6
LEADING_MENTION = re.compile(r"^\s*@\S+\s*")
FILE_NAMES = {"image": "image.jpg", "file": "file.bin"}
"""The name a received image or file gets (the callback gives none)."""


@dataclass
class Stream:
    """One message's reply as WeCom's stream-refresh callbacks ask for it (stream.id is the msgid)."""

    id: str
    chat: str
    response_url: str = ""
    born: float = field(default_factory=time.monotonic)
    text: str = ""
    claimed: bool = False
    """A reply's text goes here (else a message answered without one: a steer, a refusal)."""
    done: bool = False
    """Its text is final (`Adapter.finished`)."""
    here: bool = True
    """Opened by this process's answer to the message (else by a gateway before a restart: its refreshes
    are closed here, and the rerun's reply goes through the response_url)."""
    card: dict[str, Any] | None = None
    card_sent: bool = False
    """WeCom takes one card with a message's stream (stream_with_template_card), once."""
    closed: bool = False
    """A refresh was answered finish=true: WeCom asks no more."""

    def answer(self, finish: bool) -> dict[str, Any]:
        """The passive reply to a refresh (or to the message itself)."""
        stream = {"id": self.id, "finish": finish, "content": self.text}
        if self.card is not None and not self.card_sent:
            self.card_sent = True
            return {"msgtype": "stream_with_template_card", "stream": stream, "template_card": self.card}
        return {"msgtype": "stream", "stream": stream}


def inbound(platform: str, message: dict[str, Any], bot_name: str) -> Inbound | None:
    """A message callback as the gateway sees it; None for a kind it does not answer."""
    user = str((message.get("from") or {}).get("userid", ""))
    group = message.get("chattype") == "group"
    chat = str(message.get("chatid", "")) if group else user
    kind = str(message.get("msgtype", ""))
    texts: list[str] = []
    files: list[Attachment] = []
    msgid = str(message.get("msgid", ""))
    _read(kind, message, texts, files, msgid)
    if not texts and not files:
        return None
    text = "\n".join(texts)
    if group:
        text = _unmentioned(text, bot_name)
    quote = message.get("quote")
    if isinstance(quote, dict):
        quoted: list[str] = []
        _read(str(quote.get("msgtype", "")), quote, quoted, [], msgid)
        if quoted:
            text = "\n".join(f"> {line}" for line in "\n".join(quoted).splitlines()) + "\n\n" + text
    return Inbound(
        platform=platform, chat=chat, message_id=msgid, user=user, text=text, direct=not group, files=files,
        reply_url=str(message.get("response_url", "")) or None,
    )  # fmt: skip


def _read(kind: str, body: dict[str, Any], texts: list[str], files: list[Attachment], msgid: str) -> None:
    part = body.get(kind)
    if not isinstance(part, dict):
        return
    if kind in ("text", "voice") and part.get("content"):  # a voice message comes as its transcript
        texts.append(str(part["content"]))
    elif kind in FILE_NAMES and part.get("url"):
        tag = hashlib.sha1(f"{msgid}:{len(files)}".encode()).hexdigest()[:12]
        files.append(Attachment(name=f"{tag}-{FILE_NAMES[kind]}", ref=str(part["url"])))
    elif kind == "mixed":
        for item in part.get("msg_item") or []:
            if isinstance(item, dict):
                _read(str(item.get("msgtype", "")), item, texts, files, msgid)


def _unmentioned(text: str, bot_name: str) -> str:
    """A group message without the robot's @mention (only a mention brings it here)."""
    if bot_name and f"@{bot_name}" in text:
        return re.sub(rf"[ \t]*@{re.escape(bot_name)}[ \t]*", " ", text).strip()
    return LEADING_MENTION.sub("", text, count=1).strip()


def button_card(text: str, buttons: list[Button]) -> dict[str, Any]:
    """A question's buttons as a button_interaction card (no markup on a card)."""
    shown = to_plain(text).strip()
    first = shown.splitlines()[0] if shown else "Choose"
    return {
        "card_type": "button_interaction",
        "main_title": {"title": first if len(first) <= TITLE_LIMIT else first[: TITLE_LIMIT - 1] + "…"},
        "sub_title_text": shown,
        "task_id": f"hermetic-{uuid.uuid4().hex}",
        "button_list": [
            {"text": b.label[:LABEL_LIMIT], "style": 1 if b.tone != "deny" else 2, "key": b.data}
            for b in buttons[:MAX_BUTTONS]
        ],
    }


def answered_card(card: dict[str, Any], text: str) -> dict[str, Any]:
    """The card after its press: the question's new text, one button showing the answer (a press of it
    finds the question closed)."""
    shown = to_plain(text).strip()
    last = shown.splitlines()[-1] if shown else "…"
    return card | {
        "sub_title_text": shown,
        "button_list": [{"text": last[:LABEL_LIMIT], "style": 1, "key": f"closed:{card['task_id']}"}],
    }
