"""Each platform's connection as `hermetic gateway status` and the console's status page show it: saved
in the store by the running gateway at each change of its connection (connected, an error, stopped), so
another process can read it. Its messages are counted from the stored messages when read, so a message
costs no write of the status (and a gateway killed outright leaves counts that are still true)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from ..config.settings import Settings

KEPT_ERRORS = 5


class PlatformStatus(BaseModel):
    platform: str
    state: str = "starting"
    """starting, connected, reconnecting, stopped (a bad token, or the gateway stopped)."""
    since: float = 0.0
    started_at: float = Field(default_factory=time.time)
    """When the gateway started: its messages are the ones stored since."""
    errors: list[str] = []
    """The latest errors, newest last, each with its time."""
    updated_at: float = 0.0

    def connected(self) -> None:
        self.state, self.since = "connected", time.time()
        self.updated_at = self.since

    def failed(self, error: str) -> None:
        self.state = "stopped" if error.startswith("stopped") else "reconnecting"
        self.since = self.updated_at = time.time()
        stamp = time.strftime("%H:%M:%S")
        self.errors = [*self.errors, f"{stamp} {error}"][-KEPT_ERRORS:]

    def stopped(self) -> None:
        self.state, self.since = "stopped", time.time()
        self.updated_at = self.since


class PlatformReport(BaseModel):
    """One configured platform as the gateway last recorded it, with its messages read from the store now."""

    platform: str
    state: str
    """connected, reconnecting, stopped, starting; `never run` when no gateway has recorded this platform."""
    since: float | None
    """When it entered that state (seconds since the epoch)."""
    last_message_at: float | None
    """The newest message stored from this platform (read now)."""
    received: int
    answered: int
    """Messages received and answered since the gateway last started."""
    waiting: int
    """Messages stored but not answered yet (read now): the next start answers them."""
    errors: list[str]
    """The latest errors, newest last, each with its time (the gateway's clock)."""
    last_error: str | None
    updated_at: float | None
    """When the gateway last wrote this record. A gateway killed outright (SIGKILL, a power cut) writes
    nothing more: its last state stays, with this time."""


def platform_reports(settings: Settings) -> list[PlatformReport]:
    """Each platform of the profile's config.yaml, as the running gateway (in any process) recorded it."""
    from .records import GatewayStore

    store = GatewayStore(str(settings.database_url))
    try:
        reports = []
        for platform in settings.gateway.platforms:
            saved = store.get_state(f"status:{platform}")
            found = PlatformStatus.model_validate_json(saved) if saved else None
            last = store.last_inbound(platform)
            received, answered = store.counts_since(platform, found.started_at) if found else (0, 0)
            reports.append(
                PlatformReport(
                    platform=platform,
                    state=found.state if found else "never run",
                    since=found.since if found else None,
                    last_message_at=last.received_at if last else None,
                    received=received,
                    answered=answered,
                    waiting=len(store.unanswered(platform)),
                    errors=found.errors if found else [],
                    last_error=found.errors[-1] if found and found.errors else None,
                    updated_at=found.updated_at if found else None,
                )
            )
        return reports
    finally:
        store.close()
