"""Sessions' events in PostgreSQL, so a follower on any replica sees them: a table of the newest events
per session, written by the owning replica, and a NOTIFY on commit that wakes the other replicas.

An events table with notification rather than NOTIFY alone: a NOTIFY payload is at most 8000 bytes (a
tool's output or image is more), and a follower that connects late or reconnects (Last-Event-ID) reads
what it missed from the table. The notification carries only the session id; it is sent in the writing
transaction, so PostgreSQL delivers it after the rows are visible.
"""

from __future__ import annotations

import logging
import queue
import threading

from sqlalchemy import Engine, LargeBinary, text
from sqlmodel import Column, Field, SQLModel

from ..events import Event, EventAdapter
from .engine import create_tables
from .leases import Leases

log = logging.getLogger(__name__)
CHANNEL = "hermetic_events"
KEPT = 2000
"""Events kept per session (the oldest are pruned as new ones come), as many as a live session keeps."""
IMAGE_DATA = {"images": {"__all__": {"data"}}}


class SessionEventRecord(SQLModel, table=True):
    __tablename__ = "session_events"

    session_id: str = Field(primary_key=True)
    seq: int = Field(primary_key=True)
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    """The event as JSON."""


class EventTable:
    """Writes (batched, on a thread of its own, off the event loop) and reads of the events table. The
    replica of `leases` writes only events of sessions no other replica holds: one that lost a lease
    while its turn went on must not tell the new owner's followers how that turn ended."""

    def __init__(self, engine: Engine, leases: Leases) -> None:
        self.engine, self.leases = engine, leases
        create_tables(engine, [SQLModel.metadata.tables["session_events"]])
        self._queue: queue.SimpleQueue[tuple[str, int, bytes] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_batches, name="hermetic-events", daemon=True)
        self._thread.start()

    def put(self, session_id: str, seq: int, event: Event) -> None:
        self._queue.put((session_id, seq, EventAdapter.dump_json(event, exclude=IMAGE_DATA)))

    def last_seq(self, session_id: str) -> int:
        with self.engine.connect() as conn:
            found = conn.scalar(
                text("SELECT max(seq) FROM session_events WHERE session_id = :id"), {"id": session_id}
            )
        return int(found or 0)

    def after(self, session_id: str, after: int) -> list[tuple[int, Event]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT seq, data FROM session_events WHERE session_id = :id AND seq > :after "
                    "ORDER BY seq"
                ),
                {"id": session_id, "after": after},
            ).all()
        return [(int(seq), EventAdapter.validate_json(data)) for seq, data in rows]

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(10)

    def _write_batches(self) -> None:
        while (first := self._queue.get()) is not None:
            batch = [first]
            while not self._queue.empty() and len(batch) < 500:
                item = self._queue.get()
                if item is None:
                    self._write(batch)
                    return
                batch.append(item)
            self._write(batch)

    def _write(self, batch: list[tuple[str, int, bytes]]) -> None:
        newest: dict[str, int] = {}
        for session_id, seq, _ in batch:
            newest[session_id] = max(seq, newest.get(session_id, 0))
        try:
            with self.engine.begin() as conn:
                lost = self.leases.held_elsewhere(conn, newest)
                if lost:
                    log.warning("not publishing events of sessions another replica holds now: %s", lost)
                    batch = [item for item in batch if item[0] not in lost]
                    newest = {s: n for s, n in newest.items() if s not in lost}
                    if not batch:
                        return
                conn.execute(
                    text(
                        "INSERT INTO session_events (session_id, seq, data) VALUES (:id, :seq, :data) "
                        "ON CONFLICT DO NOTHING"  # a replica that lost its lease repeats a number: kept once
                    ),
                    [{"id": s, "seq": n, "data": d} for s, n, d in batch],
                )
                for session_id, seq in newest.items():
                    conn.execute(
                        text("DELETE FROM session_events WHERE session_id = :id AND seq <= :old"),
                        {"id": session_id, "old": seq - KEPT},
                    )
                    conn.execute(
                        text("SELECT pg_notify(:channel, :id)"), {"channel": CHANNEL, "id": session_id}
                    )
        except Exception:  # the run goes on; followers elsewhere miss these events, the history has them
            log.exception("could not write %d events to the events table", len(batch))
