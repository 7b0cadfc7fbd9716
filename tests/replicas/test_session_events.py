"""The events table's listener across a lost connection (on the test run's real PostgreSQL): it listens
again, tells its followers to read what they missed, and wakes them for events written after."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import psycopg
import pytest
from postgres import LocalPostgres

from control_plane.events import Notice
from control_plane.store.engine import open_engine
from control_plane.store.leases import Leases
from control_plane.store.pg_listener import Listener
from control_plane.store.session_events import CHANNEL, EventTable


@pytest.fixture
def database(postgres: LocalPostgres) -> Iterator[str]:
    with postgres.fresh_database() as url:
        yield url


def _listeners_cut(url: str) -> int:
    """Terminate the backends LISTENing on the events channel (as a PostgreSQL restart would)."""
    dsn = url.replace("postgresql+psycopg", "postgresql")
    with psycopg.connect(dsn, autocommit=True) as conn:
        return len(
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query = %s AND pid <> pg_backend_pid()",
                (f"LISTEN {CHANNEL}",),
            ).fetchall()
        )


def test_the_listener_listens_again_after_its_connection_is_cut(database: str) -> None:
    woken: queue.Queue[str] = queue.Queue()
    engine = open_engine(database)
    table = EventTable(engine, Leases(engine, "r1", 5.0))
    listener = Listener(database, woken.put, lambda: woken.put("<missed>"))
    try:
        table.put("s1", 1, Notice(message="before"))
        assert woken.get(timeout=30) == "s1"

        assert _listeners_cut(database) == 1
        assert woken.get(timeout=60) == "<missed>"  # back, and its followers told to read the table

        table.put("s1", 2, Notice(message="after"))
        assert woken.get(timeout=30) == "s1"  # notifications reach it again
        assert [seq for seq, _ in table.after("s1", 0)] == [1, 2]
    finally:
        listener.close()
        table.close()
