"""The run log: every event but the streamed pieces, one JSON line each, in HOME/logs/events.jsonl."""

from __future__ import annotations

import logging
from logging.handlers import RotatingFileHandler
from pathlib import Path

from ..events import Event, EventAdapter

STREAMED = {"text_delta", "reasoning_delta", "tool_progress"}
"""Not logged: their content arrives whole in assistant_message (reasoning: the stored message) / tool_end."""
IMAGE_DATA = {"images": {"__all__": {"data"}}}  # a tool's images are logged by their labels


class EventLog:
    def __init__(self, home: Path, max_bytes: int = 10 << 20, keep: int = 3) -> None:
        self.path = home / "logs" / "events.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # a private logger: rotation and locking from logging, nothing propagated to the app's handlers
        self._logger = logging.Logger(f"hermetic.events.{home}")
        handler = RotatingFileHandler(self.path, maxBytes=max_bytes, backupCount=keep, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._logger.addHandler(handler)

    def write(self, event: Event) -> None:
        if event.type not in STREAMED:
            self._logger.info(EventAdapter.dump_json(event, exclude=IMAGE_DATA).decode())

    def close(self) -> None:
        for handler in self._logger.handlers:
            handler.close()
