"""Which session an outside conversation is talking to: (profile, surface, key) -> session id, with when
the binding began and when it was last used, in the sessions database.

One service for every surface that meets conversations it did not start: a chat of the gateway, a /v1
front end's conversation, an A2A context, an MCP client's session. In the database (not a file or a
process's memory), so a binding survives a restart and every process on the database sees the same one.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import ColumnElement, Connection, Engine, and_, delete, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from .engine import write_transaction
from .records import BindingRecord

Surface = Literal["gateway", "openai", "a2a", "mcp", "message"]
"""message: a client's idempotency key for a message it posted (POST /sessions/ID/messages)."""


@dataclass(frozen=True)
class ResetPolicy:
    """When a binding stops holding: never, at the first use on a later day than it began, or after
    `idle_hours` without use."""

    mode: Literal["never", "daily", "idle"] = "never"
    idle_hours: float = 24.0

    def expired(self, binding: BindingRecord, now: float) -> bool:
        if self.mode == "idle":
            return now - binding.last_at > self.idle_hours * 3600
        if self.mode == "daily":
            return datetime.date.fromtimestamp(binding.started_at) != datetime.date.fromtimestamp(now)
        return False


class Bindings:
    """Thread-safe; each call is one transaction on the store's engine."""

    def __init__(self, engine: Engine, profile: str) -> None:
        self._engine = engine
        self._profile = profile

    def _key(self, surface: Surface, key: str) -> ColumnElement[bool]:
        return and_(
            col(BindingRecord.profile) == self._profile,
            col(BindingRecord.surface) == surface,
            col(BindingRecord.key) == key,
        )

    def get(self, surface: Surface, key: str) -> BindingRecord | None:
        with self._engine.connect() as conn:
            row = conn.execute(select(BindingRecord).where(self._key(surface, key))).first()
        return BindingRecord.model_validate(row._mapping) if row else None

    def current(self, surface: Surface, key: str, policy: ResetPolicy) -> str | None:
        """The bound session, unless there is none or `policy` says it has lapsed."""
        found = self.get(surface, key)
        if found is None or policy.expired(found, time.time()):
            return None
        return found.session_id

    def bind(self, surface: Surface, key: str, session_id: str, *, keep: int | None = None) -> None:
        """Point `key` at `session_id` and mark it used now; the clock of `started_at` restarts only when
        the session changes. With `keep`, the surface's least recently used bindings past that many are
        forgotten."""
        now = time.time()
        where = self._key(surface, key)
        with write_transaction(self._engine) as conn:
            found = conn.execute(select(BindingRecord).where(where)).first()
            started = found.started_at if found is not None and found.session_id == session_id else now
            conn.execute(delete(BindingRecord).where(where))
            self._insert(conn, surface, (key, session_id, started, now))
            if keep is not None:
                self._forget_past(conn, surface, keep)

    def _insert(self, conn: Connection, surface: Surface, row: tuple[str, str, float, float]) -> None:
        key, session_id, started, last = row
        values = {"key": key, "session_id": session_id, "started_at": started, "last_at": last}
        conn.execute(insert(BindingRecord).values(profile=self._profile, surface=surface, **values))

    def _forget_past(self, conn: Connection, surface: Surface, keep: int) -> None:
        mine = (col(BindingRecord.profile) == self._profile, col(BindingRecord.surface) == surface)
        count = conn.scalar(select(func.count()).select_from(BindingRecord).where(*mine)) or 0
        if count <= keep:
            return
        by_age = select(col(BindingRecord.key)).where(*mine).order_by(col(BindingRecord.last_at))
        oldest = by_age.limit(count - keep)
        conn.execute(delete(BindingRecord).where(*mine, col(BindingRecord.key).in_(oldest)))

    def claim(self, surface: Surface, key: str, session_id: str, *, keep: int) -> bool:
        """Bind `key` unless it is bound already (at once, for every process on the database); whether
        this call bound it. The surface's least recently used keys past `keep` are forgotten."""
        now = time.time()
        try:
            with write_transaction(self._engine) as conn:
                self._insert(conn, surface, (key, session_id, now, now))
                self._forget_past(conn, surface, keep)
        except IntegrityError:  # the primary key: another call bound it first
            return False
        return True

    def forget(self, surface: Surface, key: str) -> None:
        with write_transaction(self._engine) as conn:
            conn.execute(delete(BindingRecord).where(self._key(surface, key)))

    def take_over(self, surface: Surface, rows: list[tuple[str, str, float, float]]) -> int:
        """Keep bindings an older release kept elsewhere: (key, session, started_at, last_at), oldest
        first; a key bound here already keeps its binding. Returns how many were new."""
        taken = 0
        with write_transaction(self._engine) as conn:
            for key, session_id, started, last in rows:
                if conn.execute(select(col(BindingRecord.key)).where(self._key(surface, key))).first():
                    continue
                self._insert(conn, surface, (key, session_id, started, last))
                taken += 1
        return taken
