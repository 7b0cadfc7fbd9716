"""PostgreSQL's planner statistics follow the messages the store inserts (store/planner_stats.py): analyzed
once as many messages went in as the statistics counted, not on every insert. Real PostgreSQL."""

from __future__ import annotations

import logging

import psycopg
import pytest
from postgres import SUPERUSER, LocalPostgres
from sqlalchemy import text

from control_plane.store import Store
from control_plane.store.planner_stats import CHECK_EVERY

P = "default"


POSTGRES_ONLY = pytest.mark.parametrize("store", ["postgresql"], indirect=True)  # conftest's store


def _no_autovacuum(store: Store) -> None:
    """Only the store analyzes these tables during the test (autovacuum could at any minute)."""
    with store.engine.begin() as conn:
        for table in ("messages", "sessions"):
            conn.execute(text(f"ALTER TABLE {table} SET (autovacuum_enabled = off)"))


def _counted(store: Store) -> dict[str, float]:
    """What the planner's statistics say each table holds (-1: never analyzed)."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT relname, reltuples FROM pg_class WHERE relname IN ('messages', 'sessions')")
        )
        return {name: float(count) for name, count in rows}


def _add(store: Store, sessions: int, per_session: int) -> None:
    for i in range(sessions):
        session = store.create_session(P, title=f"s{i}")
        store.add_messages(session.id, [{"role": "user", "content": f"m{n}"} for n in range(per_session)])


@POSTGRES_ONLY
def test_a_bulk_load_is_analyzed_as_it_grows(store: Store) -> None:
    _no_autovacuum(store)
    assert _counted(store) == {"messages": -1, "sessions": -1}
    _add(store, 10, CHECK_EVERY // 10 - 1)
    assert _counted(store)["messages"] == -1  # not yet looked at
    _add(store, 1, 10)
    assert _counted(store) == {"messages": CHECK_EVERY, "sessions": 11}


@POSTGRES_ONLY
def test_fewer_new_messages_than_counted_leave_the_statistics(store: Store) -> None:
    _no_autovacuum(store)
    _add(store, 2, CHECK_EVERY)
    assert _counted(store)["messages"] == 2 * CHECK_EVERY  # analyzed at 1,000 and at 2,000
    _add(store, 1, CHECK_EVERY)  # looked at: 1,000 new of 2,000 counted
    assert _counted(store)["messages"] == 2 * CHECK_EVERY
    _add(store, 1, CHECK_EVERY)  # 2,000 new of 2,000
    assert _counted(store)["messages"] == 4 * CHECK_EVERY


def test_statistics_that_cannot_be_taken_leave_the_messages_stored(
    postgres: LocalPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    name = postgres.create_database()
    admin = psycopg.connect(
        host="127.0.0.1", port=postgres.port, user=SUPERUSER, dbname=name, autocommit=True
    )
    try:
        admin.execute(f"ALTER DATABASE \"{name}\" SET lock_timeout = '200ms'".encode())
        with Store(postgres.url(name)) as store:
            _no_autovacuum(store)
            with admin.transaction():  # holds the lock ANALYZE needs (inserts do not)
                admin.execute(b"LOCK TABLE messages IN SHARE UPDATE EXCLUSIVE MODE")
                with caplog.at_level(logging.WARNING, logger="control_plane.store.planner_stats"):
                    _add(store, 1, CHECK_EVERY)
            assert "planner statistics not refreshed" in caplog.text
            assert len(store.messages(store.list_sessions(P)[0].id)) == CHECK_EVERY
            assert _counted(store)["messages"] == -1
            _add(store, 1, CHECK_EVERY)  # the next look analyzes what the failed one left
            assert _counted(store)["messages"] == 2 * CHECK_EVERY
    finally:
        admin.close()
        postgres.drop_database(name)
