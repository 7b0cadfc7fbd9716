"""Turns raw terminal bytes into what a model should read: UTF-8 text, no escapes, head+tail cut."""

from __future__ import annotations

import codecs
import re
from typing import Callable

# CSI, OSC (ended by BEL or ST), other two-byte escapes, and C0 controls other than \t \n \r.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"
    r"|\x1b[PX^_][^\x1b]*\x1b\\"
    r"|\x1b[ -/]*[0-~]"
    r"|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]"
)
# The start of an escape sequence that the next chunk may complete.
_INCOMPLETE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[PX^_][^\x1b]*\x1b?|[ -/]*)\Z")


def strip_escapes(text: str) -> str:
    return _ESCAPES.sub("", text)


def collapse_carriage_returns(text: str) -> str:
    """A line overwritten by carriage returns keeps only what was written last (progress bars).
    Line by line, not by regex: a regex over one long line without \r backtracks quadratically."""
    if "\r" not in text:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if "\r" in line:
            line = line.rstrip("\r")
            lines[i] = line[line.rfind("\r") + 1 :]
    return "\n".join(lines)


def clean(data: bytes) -> str:
    """One-shot version of OutputBuffer for complete byte strings."""
    return collapse_carriage_returns(strip_escapes(data.decode("utf-8", "replace")))


class OutputBuffer:
    """Accumulates a command's output in bounded memory.

    Everything up to `limit` characters is kept as cleaned text. Past that, the first half
    is frozen as the head and only the last bytes are kept raw for the tail, so 100 MB of
    output costs no more memory or CPU than a few times the limit.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 200)
        self.total_bytes = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._carry = ""  # an escape sequence cut at a chunk boundary
        self._text: list = []
        self._text_len = 0
        self._head: str | None = None
        self._tail_raw = bytearray()

    @property
    def overflowed(self) -> bool:
        return self._head is not None

    def feed(self, data: bytes) -> str:
        """Add bytes; return the newly cleaned text (empty once past the limit)."""
        if not data:
            return ""
        self.total_bytes += len(data)
        if self._head is not None:
            self._tail_raw += data
            excess = len(self._tail_raw) - 4 * self.limit
            if excess > 0:
                del self._tail_raw[:excess]
            return ""
        text = self._carry + self._decoder.decode(data)
        self._carry = ""
        cut = text.rfind("\x1b")
        if cut != -1 and len(text) - cut < 256 and _INCOMPLETE.match(text, cut):
            text, self._carry = text[:cut], text[cut:]
        text = strip_escapes(text)
        self._text.append(text)
        self._text_len += len(text)
        if self._text_len > self.limit:
            joined = "".join(self._text)
            half = self.limit // 2
            self._head = joined[:half]
            self._tail_raw = bytearray(joined[half:].encode("utf-8", "replace"))
            self._text = []
            return text[: max(0, len(text) - (self._text_len - self.limit))]
        return text

    def result(self) -> tuple[str, bool]:
        """The text for the model and whether it was cut."""
        if self._head is None:
            rest = self._decoder.decode(b"", final=True)
            return collapse_carriage_returns("".join(self._text) + strip_escapes(self._carry + rest)), False
        half = self.limit // 2
        tail = strip_escapes(self._tail_raw.decode("utf-8", "replace"))[-half:]
        marker = (
            "\n\n[... output truncated: %s bytes in all; "
            "the first %s and the last %s characters are shown ...]\n\n"
            % (format(self.total_bytes, ","), format(len(self._head), ","), format(len(tail), ","))
        )
        return collapse_carriage_returns(self._head) + marker + collapse_carriage_returns(tail), True


class StreamBatcher:
    """Batches streamed text: the first piece goes out at once, then at most one per 50 ms or 32 KB."""

    def __init__(self, stream: Callable[[str], None] | None) -> None:
        self._stream = stream
        self._parts: list = []
        self._size = 0
        self._sent = 0.0
        self.due = float("inf")  # when the buffered text must go out

    def add(self, text: str, now: float) -> None:
        if not text or self._stream is None:
            return
        self._parts.append(text)
        self._size += len(text)
        self.due = self._sent + 0.05
        if self._size >= 32768:
            self.due = now
        self.flush_if_due(now)

    def flush_if_due(self, now: float) -> None:
        if self._parts and now >= self.due and self._stream is not None:
            self._stream("".join(self._parts))
            self._parts, self._size, self._sent, self.due = [], 0, now, float("inf")
