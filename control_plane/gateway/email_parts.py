"""Mail as the email adapter reads and writes it (the stdlib's `email` package): the thread a mail belongs
to (Message-ID, In-Reply-To, References), what the person wrote (the plain part, or the HTML part as
text, without the quoted mail below it), its attachments, whether a machine sent it (auto-replies,
bounces, mailing lists: never answered, so two robots cannot talk forever), and the replies: a
text/plain and an HTML part from the model's Markdown, in the same thread."""

from __future__ import annotations

import email
import email.policy
import email.utils
import mimetypes
from email.message import EmailMessage
from pathlib import Path

from inscriptis import get_text
from mailparser_reply import EmailReplyParser
from markdown_it import MarkdownIt
from pydantic import BaseModel

from .plain import to_plain

_HTML = MarkdownIt("commonmark", {"html": False}).enable("table")
"""The model's Markdown as HTML; raw HTML in it is shown as text, never passed on."""
_BULK = {"bulk", "junk", "list", "auto_reply"}
_AUTOMATED_HEADERS = ("X-Autoreply", "X-Autorespond", "X-Auto-Response-Suppress")
_DAEMONS = {"mailer-daemon", "postmaster"}


class Thread(BaseModel):
    """What a reply in a thread needs: the Subject and the chain of Message-IDs it answers."""

    subject: str
    references: list[str]
    """The thread's Message-IDs, oldest first; the last is the mail a reply answers (In-Reply-To)."""


def parse(raw: bytes) -> EmailMessage:
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)  # the default policy's message class
    return message


def sender(message: EmailMessage) -> tuple[str, str]:
    """The From's address (lower case) and display name."""
    name, address = email.utils.parseaddr(str(message.get("From", "")))
    return address.strip().lower(), name


def message_ids(value: object) -> list[str]:
    """The <id>s in a Message-ID, In-Reply-To or References header, in order."""
    return [f"<{part.split('>')[0]}>" for part in str(value or "").split("<")[1:] if ">" in part]


def thread_of(message: EmailMessage) -> tuple[str, Thread]:
    """The thread's root (its first Message-ID: the same for every mail of one thread) and the thread
    a reply to `message` continues."""
    own = (message_ids(message.get("Message-ID")) or [""])[0]
    chain = message_ids(message.get("References"))
    for answered in message_ids(message.get("In-Reply-To")):
        if answered not in chain:
            chain.append(answered)
    references = [*chain, own] if own else chain
    subject = str(message.get("Subject", "")).strip()
    return (references[0] if references else ""), Thread(subject=subject, references=references)


def automated(message: EmailMessage, own_address: str) -> str | None:
    """Why a machine sent this mail (RFC 3834 and what mail systems put on bounces, auto-replies and
    list mail), or None for a person's mail."""
    auto = str(message.get("Auto-Submitted", "no")).split(";")[0].strip().lower()
    if auto != "no":
        return f"Auto-Submitted: {auto}"
    if str(message.get("Return-Path", "")).strip() == "<>":
        return "an empty return path (a bounce or a receipt)"
    if message.get_content_type() == "multipart/report":
        return "a delivery or read report"
    listed = [name for name in message if name.lower().startswith("list-")]
    if listed:
        return f"mailing list mail ({listed[0]})"
    if str(message.get("Precedence", "")).strip().lower() in _BULK:
        return f"Precedence: {message['Precedence']}"
    marked = [name for name in _AUTOMATED_HEADERS if name in message]
    if marked:
        return f"an auto-reply ({marked[0]})"
    address, _ = sender(message)
    if "@" not in address:
        return "no sender address"
    if address.split("@")[0] in _DAEMONS:
        return f"from {address}"
    if address == own_address.lower():
        return "our own mail"
    return None


def body_text(message: EmailMessage) -> str:
    """What the person wrote: the plain part (else the HTML part as text), without the quoted mail it
    answers or the signature."""
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    assert isinstance(part, EmailMessage)
    try:
        content = str(part.get_content())
    except LookupError:  # a charset Python does not know: read as UTF-8, what is not shown as U+FFFD
        content = bytes(part.get_payload(decode=True) or b"").decode("utf-8", "replace")
    content = content.replace("\r\n", "\n")
    if part.get_content_type() == "text/html":
        content = get_text(content)
    latest = EmailReplyParser(languages=["en"]).read(text=content).latest_reply
    return (latest or content).strip()


def attachments(message: EmailMessage) -> list[tuple[str, bytes]]:
    """Each attached file's name and bytes, in the mail's order (`attachment(message, n)` is the nth)."""
    found = []
    for number, part in enumerate(message.iter_attachments()):
        assert isinstance(part, EmailMessage)
        data = part.get_payload(decode=True)
        if isinstance(data, bytes):
            found.append((part.get_filename() or f"attachment-{number}", data))
    return found


def compose(
    sender_address: str,
    sender_name: str,
    to: str,
    thread: Thread,
    markdown: str,
    domain: str,
    file: Path | None = None,
) -> EmailMessage:
    """A reply in `thread` (or, with no references, a new mail with its Subject): text/plain and HTML
    parts from `markdown`, and `file` attached. Marked as automatic (Auto-Submitted), so that a
    well-behaved auto-responder on the other side does not answer it."""
    message = EmailMessage()
    message["From"] = email.utils.formataddr((sender_name, sender_address))
    message["To"] = to
    subject = thread.subject or "(no subject)"
    replying = bool(thread.references)
    message["Subject"] = subject if not replying or subject.lower().startswith("re:") else f"Re: {subject}"
    message["Message-ID"] = email.utils.make_msgid(domain=domain)
    message["Date"] = email.utils.formatdate(localtime=True)
    if replying:
        message["In-Reply-To"] = thread.references[-1]
        message["References"] = " ".join(thread.references)
    message["Auto-Submitted"] = "auto-replied"
    message["X-Auto-Response-Suppress"] = "All"  # Exchange's out-of-office replies: none to us
    message.set_content(to_plain(markdown) + "\n")
    message.add_alternative(f"<html><body>{_HTML.render(markdown)}</body></html>", subtype="html")
    if file is not None:
        kind = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
        main, _, sub = kind.partition("/")
        message.add_attachment(file.read_bytes(), maintype=main, subtype=sub, filename=file.name)
    return message
