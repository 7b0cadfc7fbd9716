"""Matrix event contents both ways: a reply's Markdown as org.matrix.custom.html, a streamed reply's
edits (m.replace), thread relations (m.thread), approval choices as reactions; and a user's event as
the text, files, thread and choice the gateway takes from it."""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt

from .base import Attachment, Button

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
"""The model's raw HTML is escaped, not passed on (html off): clients sanitise, but need not."""
FILE_TYPES = ("m.file", "m.image", "m.audio", "m.video")


def to_html(markdown: str) -> str:
    return _MARKDOWN.render(markdown).strip()


def reaction_keys(buttons: list[Button]) -> list[str]:
    """Each choice's reaction: ✅ the first, ❌ the last, a keycap digit (2️⃣ ...) those between."""
    keys = [f"{number}\ufe0f\u20e3" for number in range(1, len(buttons) + 1)]
    if len(buttons) > 1:
        keys[0], keys[-1] = "✅", "❌"
    return keys


def with_choices(text: str, buttons: list[Button] | None) -> str:
    """A question's text with how to answer it: a reaction, or a reply naming the choice."""
    if not buttons:
        return text
    listed = " · ".join(f"{key} {b.label}" for key, b in zip(reaction_keys(buttons), buttons, strict=True))
    return f"{text}\n\nReact with {listed} (or reply with the choice)"


def message_content(text: str, thread: str | None = None) -> dict[str, Any]:
    """An m.text with the Markdown source as body and its HTML as formatted_body; in a thread, its
    relation (with the fallback reply older clients show)."""
    content: dict[str, Any] = {
        "msgtype": "m.text", "body": text,
        "format": "org.matrix.custom.html", "formatted_body": to_html(text),
    }  # fmt: skip
    if thread:
        content["m.relates_to"] = {
            "rel_type": "m.thread", "event_id": thread, "is_falling_back": True,
            "m.in_reply_to": {"event_id": thread},
        }  # fmt: skip
    return content


def edit_content(event_id: str, text: str) -> dict[str, Any]:
    """An edit of our message `event_id`: the new content in m.new_content, a `* ` fallback around it."""
    new = message_content(text)
    return {
        **{key: new[key] for key in ("msgtype", "format")},
        "body": f"* {new['body']}", "formatted_body": f"* {new['formatted_body']}",
        "m.new_content": new, "m.relates_to": {"rel_type": "m.replace", "event_id": event_id},
    }  # fmt: skip


def file_content(
    name: str, url: str, mime: str, size: int, caption: str, thread: str | None
) -> dict[str, Any]:
    """An m.image (an image/* type) or m.file pointing at an uploaded mxc:// URL."""
    content: dict[str, Any] = {
        "msgtype": "m.image" if mime.startswith("image/") else "m.file",
        "body": caption or name, "filename": name, "url": url, "info": {"mimetype": mime, "size": size},
    }  # fmt: skip
    if thread:
        content["m.relates_to"] = message_content("", thread)["m.relates_to"]
    return content


def relation(content: dict[str, Any]) -> dict[str, Any]:
    found = content.get("m.relates_to")
    return found if isinstance(found, dict) else {}


def thread_of(content: dict[str, Any]) -> str | None:
    related = relation(content)
    return str(related["event_id"]) if related.get("rel_type") == "m.thread" else None


def replied_to(content: dict[str, Any]) -> str | None:
    """The event a rich reply answers (m.in_reply_to), where it is not a thread's fallback."""
    related = relation(content)
    if related.get("is_falling_back"):
        return None
    reply = related.get("m.in_reply_to")
    return str(reply["event_id"]) if isinstance(reply, dict) and "event_id" in reply else None


def body_text(content: dict[str, Any]) -> str:
    """The text of a user's m.text: a rich reply's quoted fallback (`> ` lines first) left out."""
    text = str(content.get("body", ""))
    if replied_to(content) is None:
        return text
    lines = text.split("\n")
    while lines and lines[0].startswith(">"):
        lines.pop(0)
    return "\n".join(lines).strip()


def attachment_of(content: dict[str, Any]) -> Attachment | None:
    """The file an m.file / m.image / m.audio / m.video points at (an unencrypted mxc:// URL)."""
    url = content.get("url")
    if content.get("msgtype") not in FILE_TYPES or not isinstance(url, str) or not url.startswith("mxc://"):
        return None
    info = content.get("info")
    size = info.get("size") if isinstance(info, dict) and isinstance(info.get("size"), int) else None
    return Attachment(name=str(content.get("filename") or content.get("body") or "file"), ref=url, size=size)


def caption_of(content: dict[str, Any]) -> str:
    """What a file's message says besides the file: its body, where a filename is given apart."""
    name, body = content.get("filename"), str(content.get("body", ""))
    return body if name and body != name else ""


def choice_named(buttons: list[Button], said: str) -> Button | None:
    """The choice a reaction key or a reply's text names (a label, case-insensitively, or its number)."""
    said = said.strip()
    keys = reaction_keys(buttons)
    for number, (key, button) in enumerate(zip(keys, buttons, strict=True), 1):
        if (
            said in (key, key.removesuffix("\ufe0f\u20e3"), str(number))
            or said.lower() == button.label.lower()
        ):
            return button
    return None
