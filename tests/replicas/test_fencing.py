"""Fencing on the test run's real PostgreSQL: a replica that lost a session's lease while its turn went on
(it could not renew in time: a long pause, a starved CPU) writes nothing more to that session, neither a
message nor an event, and a takeover never slips between such a write's check and its commit."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest
from postgres import LocalPostgres
from replica_set import until
from sqlalchemy import Engine, text

from control_plane.events import Notice
from control_plane.store.engine import open_engine
from control_plane.store.errors import StoreError
from control_plane.store.leases import Leases
from control_plane.store.session_events import EventTable
from control_plane.store.store import Store


@pytest.fixture
def database(postgres: LocalPostgres) -> Iterator[str]:
    with postgres.fresh_database() as url:
        yield url


def _lapsed(engine: Engine, session_id: str) -> None:
    """The lease runs out (as it does for a replica that stops renewing), without waiting for it."""
    with engine.begin() as conn:
        lapse = text("UPDATE session_leases SET expires_at = 0 WHERE session_id = :id")
        conn.execute(lapse, {"id": session_id})


def test_a_replica_that_lost_the_lease_saves_no_message_and_publishes_no_event(database: str) -> None:
    engine = open_engine(database)
    stale, new = Leases(engine, "stale", 5.0), Leases(engine, "new", 5.0)
    store = Store(database, background=False)
    store.fence = stale.fence
    events = EventTable(engine, stale)
    try:
        session = store.create_session("default").id
        assert stale.claim(session).owner == "stale"
        store.add_message(session, {"role": "user", "content": "hello"})  # its own: written

        _lapsed(engine, session)
        assert new.claim(session).owner == "new"
        with pytest.raises(StoreError, match="held by replica new now"):
            store.add_message(session, {"role": "assistant", "content": "answered twice"})
        assert [m.content for m in store.messages(session)] == ["hello"]

        unleased = store.create_session("default").id  # a session no replica leased (the gateway's)
        store.add_message(unleased, {"role": "user", "content": "not fenced"})
        assert len(store.messages(unleased)) == 1

        events.put(session, 7, Notice(message="from the replica that lost it"))
        events.put(unleased, 1, Notice(message="kept"))
    finally:
        events.close()  # its writer thread finishes the queued batch first
        store.close()
    assert [seq for seq, _ in events.after(unleased, 0)] == [1]
    assert events.after(session, 0) == []


def test_a_takeover_waits_for_a_fenced_write_in_flight(database: str) -> None:
    """The lease row is locked FOR SHARE by the write: the new owner's claim waits for that write's
    commit, so it reads the history with the write in it (and ends the turn as done, not interrupted)."""
    engine = open_engine(database)
    stale, new = Leases(engine, "stale", 5.0), Leases(engine, "new", 5.0)
    stale.claim("s1")
    _lapsed(engine, "s1")
    claimed: list[str] = []
    with engine.connect() as conn, conn.begin():
        stale.fence(conn, "s1")  # the write's check passed: it is still this replica's
        taker = threading.Thread(target=lambda: claimed.append(new.claim("s1").owner))
        taker.start()
        until(lambda: _waiting_on_a_lock(database), "the claim to wait on the lease row's lock")
        assert claimed == []
    taker.join(30)  # the write committed: the claim goes through
    assert claimed == ["new"]


def _waiting_on_a_lock(url: str) -> bool:
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO session_leases%%'"
        ).fetchone()
    return bool(row and row[0])
