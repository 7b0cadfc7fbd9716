"""Long replies split at a platform's message limit, code fences closed at a cut and reopened (with
their language) in the next part."""

from __future__ import annotations

import re
from collections.abc import Callable

FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


def utf16_length(text: str) -> int:
    """Telegram counts a message's length in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def split(text: str, limit: int, length: Callable[[str], int] = len) -> list[str]:
    """Parts of at most `limit` (as `length` counts), cut at line ends where possible, else at spaces."""
    if length(text) <= limit:
        return [text]
    parts: list[str] = []
    current = ""
    fence: str | None = None  # the line that opened the fence we are in, e.g. "```python"
    for piece, starts_line in _pieces(text, max(limit // 4, 1)):
        opens = starts_line and FENCE.match(piece)
        after = (None if fence else piece.strip()) if opens else fence
        closing = length("\n" + _marker(after)) if after else 0
        reopened = (fence + "\n") if fence else ""
        if current not in ("", reopened) and length(current + piece) + closing > limit:
            parts.append(current.rstrip("\n") + ("\n" + _marker(fence) if fence else ""))
            current = reopened
        current += piece
        fence = after
    if current.strip():
        parts.append(current.rstrip("\n"))
    return parts


def _marker(fence_line: str) -> str:
    found = FENCE.match(fence_line)
    return found.group(1) if found else "```"


def _pieces(text: str, size: int) -> list[tuple[str, bool]]:
    """The text's lines (with their newlines); a line longer than `size` in chunks cut at spaces.
    Each piece says whether it starts a line (only those can open or close a fence)."""
    pieces: list[tuple[str, bool]] = []
    for line in text.splitlines(keepends=True):
        first = True
        while len(line) > size:
            cut = line.rfind(" ", 0, size) + 1 or size
            pieces.append((line[:cut], first))
            line, first = line[cut:], False
        pieces.append((line, first))
    return pieces
