"""The run log: every event but the streamed pieces, one JSON line each, in HOME/logs/events.jsonl."""

from __future__ import annotations

import logging
from logging.handlers import RotatingFileHandler
from pathlib import Path

from ..events import Event, EventAdapter

STREAMED = {"text_delta", "reasoning_delta", "tool_progress"}
"""Not logged: their content arrives whole in assistant_message (reasoning: the stored message) / tool_end."""
IMAGE_DATA = {"images": {"__all__": {"data"}}}  # a tool's images are logged by their labels


class _Rotating(RotatingFileHandler):
    """RotatingFileHandler without system calls per record beyond the write: the stock one stats the path
    twice (is it a regular file? bpo-45401) and seeks to the end before each record, which on a busy event
    loop costs a GIL hand-off each. The file is ours: its size is counted as records go in, read once
    after each opening."""

    _size: int | None = None

    def shouldRollover(self, record: logging.LogRecord) -> bool:
        if self.stream is None:
            self.stream = self._open()
        if self._size is None:
            self._size = self.stream.seek(0, 2)
        self._size += len(self.format(record)) + len(self.terminator)
        if self.maxBytes > 0 and self._size >= self.maxBytes:
            self._size = None  # the record goes into the new file, counted at the next
            return True
        return False


class EventLog:
    def __init__(self, home: Path, max_bytes: int = 10 << 20, keep: int = 3) -> None:
        self.path = home / "logs" / "events.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # a private logger: rotation and locking from logging, nothing propagated to the app's handlers
        self._logger = logging.Logger(f"hermetic.events.{home}")
        handler = _Rotating(self.path, maxBytes=max_bytes, backupCount=keep, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._logger.addHandler(handler)

    def write(self, event: Event) -> None:
        if event.type not in STREAMED:
            self._logger.info(EventAdapter.dump_json(event, exclude=IMAGE_DATA).decode())

    def close(self) -> None:
        for handler in self._logger.handlers:
            handler.close()
