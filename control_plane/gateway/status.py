"""Each platform's connection as `hermetic gateway status` shows it: saved in the store by the running
gateway, so another process can read it."""

from __future__ import annotations

import time

from pydantic import BaseModel

KEPT_ERRORS = 5


class PlatformStatus(BaseModel):
    platform: str
    state: str = "starting"
    """starting, connected, reconnecting, stopped."""
    since: float = 0.0
    last_message_at: float | None = None
    received: int = 0
    answered_count: int = 0
    errors: list[str] = []
    """The latest errors, newest last, each with its time."""
    updated_at: float = 0.0

    def connected(self) -> None:
        self.state, self.since, self.updated_at = "connected", time.time(), time.time()

    def failed(self, error: str) -> None:
        self.state = "stopped" if error.startswith("stopped") else "reconnecting"
        self.since = self.updated_at = time.time()
        stamp = time.strftime("%H:%M:%S")
        self.errors = [*self.errors, f"{stamp} {error}"][-KEPT_ERRORS:]

    def received_one(self) -> None:
        self.received += 1
        self.last_message_at = self.updated_at = time.time()

    def answered(self) -> None:
        self.answered_count += 1
