"""Replicas over one PostgreSQL database: who is alive and where it listens, and which replica owns each
session (a lease: owner + expiry, renewed while the session is held, taken over once it lapses).

Times are the database's clock (`clock_timestamp()`), so replicas on machines whose clocks differ agree on
when a lease lapses. PostgreSQL only: SQLite is one process (store/serve_lock.py) and needs no lease.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlmodel import Field, SQLModel

from .engine import create_tables
from .errors import StoreError

NOW = "extract(epoch from clock_timestamp())"


class ReplicaRecord(SQLModel, table=True):
    """One `hermetic serve` process, alive while its expiry keeps being pushed on."""

    __tablename__ = "replicas"

    id: str = Field(primary_key=True)
    address: str
    """The URL other replicas reach this one at (forwarded requests)."""
    expires_at: float


class SessionLeaseRecord(SQLModel, table=True):
    """The replica a session runs on; `running`: a turn was started there and has not ended."""

    __tablename__ = "session_leases"

    session_id: str = Field(primary_key=True)
    owner: str = Field(index=True)
    expires_at: float
    running: bool = False


_HOLDER = (
    f"SELECT l.owner, r.address, l.expires_at - {NOW}, l.running FROM session_leases l "
    "LEFT JOIN replicas r ON r.id = l.owner WHERE l.session_id = :id"
)
_TABLES = [SQLModel.metadata.tables[name] for name in ("replicas", "session_leases")]


@dataclass(frozen=True)
class Holder:
    """Who holds a session's lease after a claim: this replica, or another (its address, and how many
    seconds its lease has left)."""

    owner: str
    address: str | None
    left: float
    running: bool


class Leases:
    """The lease rows of one database, for the replica `me`."""

    def __init__(self, engine: Engine, me: str, ttl: float) -> None:
        self.engine, self.me, self.ttl = engine, me, ttl
        self._leased: set[str] = set()
        """Sessions this replica claimed and has not released (lost ones stay: their writes are fenced)."""
        create_tables(engine, _TABLES)

    def register(self, address: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    f"INSERT INTO replicas (id, address, expires_at) VALUES (:me, :address, {NOW} + :ttl) ON "
                    "CONFLICT (id) DO UPDATE SET address = excluded.address, expires_at = excluded.expires_at"
                ),
                {"me": self.me, "address": address, "ttl": self.ttl},
            )

    def claim(self, session_id: str) -> Holder:
        """Take the session's lease when it is free, lapsed or already ours; the holder either way."""
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO session_leases (session_id, owner, expires_at, running) "
                    f"VALUES (:id, :me, {NOW} + :ttl, false) ON CONFLICT (session_id) DO UPDATE "
                    "SET owner = excluded.owner, expires_at = excluded.expires_at "
                    f"WHERE session_leases.owner = :me OR session_leases.expires_at < {NOW}"
                ),
                {"id": session_id, "me": self.me, "ttl": self.ttl},
            )
            row = conn.execute(text(_HOLDER), {"id": session_id}).one()
        holder = _holder(row)
        if holder.owner == self.me:
            self._leased.add(session_id)
        return holder

    def holder(self, session_id: str) -> Holder | None:
        """The session's unexpired lease, if any (read only)."""
        with self.engine.connect() as conn:
            row = conn.execute(text(f"{_HOLDER} AND l.expires_at >= {NOW}"), {"id": session_id}).first()
        return _holder(row) if row else None

    def set_running(self, session_id: str, running: bool) -> bool:
        """Mark the session's turn running or not; False when its lease is not this replica's."""
        with self.engine.begin() as conn:
            done = conn.execute(
                text("UPDATE session_leases SET running = :running WHERE session_id = :id AND owner = :me"),
                {"id": session_id, "me": self.me, "running": running},
            )
            return done.rowcount > 0

    def fence(self, conn: Connection, session_id: str) -> None:
        """Inside a write to the session (Store.fence): refuse it when another replica holds the
        session's lease: this one lost it (it could not renew in time) while its turn went on, and the new
        owner has ended that turn for its followers; a reply saved now would answer the user twice.
        Sessions this replica never leased (the gateway's, which takes no leases) are not fenced."""
        if session_id not in self._leased:
            return
        for _, owner in _locked(conn, [session_id], self.me):
            raise StoreError(
                f"session {session_id} is held by replica {owner} now: this replica lost its lease and "
                "writes nothing more to it"
            )

    def held_elsewhere(self, conn: Connection, session_ids: Collection[str]) -> set[str]:
        """Of `session_ids`, those another replica holds, read in the caller's write transaction as
        `fence` reads them."""
        return {session_id for session_id, _ in _locked(conn, session_ids, self.me)}

    def renew(self, held: list[str]) -> set[str]:
        """Push on this replica's own expiry and its leases of `held`; returns those of `held` it no
        longer owns (taken over while it could not renew: it must let them go)."""
        with self.engine.begin() as conn:
            conn.execute(
                text(f"UPDATE replicas SET expires_at = {NOW} + :ttl WHERE id = :me"),
                {"me": self.me, "ttl": self.ttl},
            )
            kept = conn.execute(
                text(  # locked in session order, as _locked locks them: never a deadlock with a write
                    f"UPDATE session_leases SET expires_at = {NOW} + :ttl WHERE session_id IN ("
                    "SELECT session_id FROM session_leases WHERE owner = :me AND session_id = ANY(:held) "
                    "ORDER BY session_id FOR UPDATE) RETURNING session_id"
                ),
                {"me": self.me, "ttl": self.ttl, "held": held},
            ).scalars()
            return set(held) - set(kept)

    def lapsed_runs(self) -> list[str]:
        """Sessions whose turn was running on a replica that stopped renewing (killed, cut off): for
        this replica to take over."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(f"SELECT session_id FROM session_leases WHERE running AND expires_at < {NOW}")
            ).scalars()
            return list(rows)

    def release(self, session_id: str) -> None:
        self._leased.discard(session_id)
        with self.engine.begin() as conn:
            conn.execute(
                text("DELETE FROM session_leases WHERE session_id = :id AND owner = :me"),
                {"id": session_id, "me": self.me},
            )

    def leave(self) -> None:
        """This replica stops: its leases and its row go at once (a kill leaves them to lapse); those of
        turns it interrupted lapse now, for another replica to end those turns for their followers."""
        with self.engine.begin() as conn:
            conn.execute(
                text("UPDATE session_leases SET expires_at = 0 WHERE owner = :me AND running"),
                {"me": self.me},
            )
            conn.execute(
                text("DELETE FROM session_leases WHERE owner = :me AND NOT running"), {"me": self.me}
            )
            conn.execute(text("DELETE FROM replicas WHERE id = :me"), {"me": self.me})


def _locked(conn: Connection, session_ids: Collection[str], me: str) -> list[tuple[str, str]]:
    """(session, owner) of the sessions among `session_ids` leased to a replica other than `me`, read in
    the caller's write transaction with their lease rows locked FOR SHARE: a takeover's claim (an update
    of the row) waits for that write to commit, or the write sees the new owner; they never miss each
    other. In session order, as renew locks rows."""
    rows = conn.execute(
        text(
            "SELECT session_id, owner FROM session_leases WHERE session_id = ANY(:ids) "
            "ORDER BY session_id FOR SHARE"
        ),
        {"ids": list(session_ids)},
    ).all()
    return [(session_id, owner) for session_id, owner in rows if owner != me]


def _holder(row: Any) -> Holder:
    return Holder(owner=row[0], address=row[1], left=max(0.0, float(row[2])), running=bool(row[3]))
