"""SQLite writers of one process take turns on a lock (store/engine.py's write_transaction) instead of
meeting in SQLite's busy handler, whose sleeps (up to 100 ms a try) missed the moment the lock freed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from control_plane.store.engine import open_engine, write_transaction
from control_plane.store.errors import StoreError


def test_a_second_engines_writer_does_not_begin_until_the_first_has_committed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/hermetic.db"
    first, second = open_engine(url), open_engine(url)  # as the Store and the gateway's store open it
    began = threading.Event()

    @event.listens_for(second, "before_cursor_execute")
    def _seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.startswith("BEGIN IMMEDIATE"):
            began.set()

    def write_second() -> None:
        with write_transaction(second) as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS second_wrote (x INTEGER)"))

    other = threading.Thread(target=write_second)
    try:
        with write_transaction(first) as conn:
            conn.execute(text("CREATE TABLE IF NOT EXISTS first_wrote (x INTEGER)"))
            other.start()
            # without turns it would issue BEGIN IMMEDIATE now and wait inside SQLite's busy handler
            assert not began.wait(0.5), "the second writer began while the first held the write lock"
        other.join(30)
        assert began.is_set() and not other.is_alive()
    finally:
        first.dispose()
        second.dispose()


def test_a_failed_write_gives_the_turn_back(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path}/hermetic.db")
    try:
        with pytest.raises(RuntimeError), write_transaction(engine):
            raise RuntimeError("the caller's own failure, mid-transaction")
        with write_transaction(engine) as conn:  # would wait out the timeout if the turn were kept
            conn.execute(text("CREATE TABLE after_failure (x INTEGER)"))
    finally:
        engine.dispose()


def test_a_writer_that_never_gets_its_turn_is_told_the_database_is_locked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = open_engine(f"sqlite:///{tmp_path}/hermetic.db")
    monkeypatch.setattr("control_plane.store.engine.BUSY_TIMEOUT_MS", 200)
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with write_transaction(engine):
            held.set()
            done.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30)
        with pytest.raises(StoreError, match="database is locked"), write_transaction(engine):
            pass
    finally:
        done.set()
        holder.join(30)
        engine.dispose()
