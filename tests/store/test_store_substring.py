"""Substring search (the fallback for terms inside longer words) and PostgreSQL's indexes behind it: pg_trgm
when the role may create the extension, a plain scan when it may not (tests/support/postgres.py's server)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from postgres import SUPERUSER, LocalPostgres
from sqlalchemy import event, text

from control_plane.store import Store
from control_plane.store.engine import PENDING_KB

P = "default"
THIRTY_DIGITS = "123456789012345678901234567890"
TRICKY = [
    "upload reached 100% of quota_limit today",
    "the user's file was named O'Brien \"final\" copy",
    f"invoice {THIRTY_DIGITS} was paid",
    "Größenänderung fehlgeschlagen: Überlauf",
    "backslash C:\\temp\\new folder",
]
FILLER_SESSIONS = 30


def _fill(store: Store) -> None:
    session = store.create_session(P)
    store.add_messages(session.id, [{"role": "user", "content": c} for c in TRICKY])


# Each query reaches the substring search (no term is a whole word of the text; every term has a trigram) and
# must find exactly the message holding it, whatever LIKE or a query language would make of its characters.
FOUND = [
    ("00%", 0),
    ("a_lim", 0),
    ("er's fil", 1),
    ("O'Bri", 1),
    ('"final" cop', 1),
    (THIRTY_DIGITS[3:-3], 2),
    ("rößenä", 3),
    ("RÖSSENÄ", None),  # ß is not ss to LIKE: nothing, and no error
    ("BERLAU", 3),
    ("p\\new", 4),
]


def test_substring_search_finds_special_characters(store: Store) -> None:
    _fill(store)
    _assert_found(store)
    assert store.search(P, "%", mode="keyword") == []  # a wildcard alone matches nothing
    assert store.search(P, "_ _ _", mode="keyword") == []
    assert store.search(P, "0%_of", mode="keyword") == []  # % and _ are literal, not wildcards


def _assert_found(store: Store) -> None:
    for query, index in FOUND:
        hits = store.search(P, query, mode="keyword")
        expected = [] if index is None else [TRICKY[index]]
        assert [_unmarked(h.snippet) for h in hits] == expected, query


def _unmarked(snippet: str) -> str:
    return snippet.replace(">>>", "").replace("<<<", "").strip(".")


@pytest.fixture(scope="module")
def filled(postgres: LocalPostgres) -> Iterator[tuple[Store, LocalPostgres, str]]:
    name = postgres.create_database()
    try:
        with Store(postgres.url(name)) as store:
            for n in range(FILLER_SESSIONS):  # enough rows that an index beats a scan, as in real history
                filler = [{"role": "user", "content": f"filler {n}.{i} about deploys"} for i in range(100)]
                store.add_messages(store.create_session(P).id, filler)
            _fill(store)
            with store._engine.begin() as conn:
                conn.execute(text("ANALYZE sessions, messages"))
            yield store, postgres, name
    finally:
        postgres.drop_database(name)


def _statements(store: Store, query: str) -> list[tuple[str, Any]]:
    """The SQL and parameters a keyword search for `query` runs."""
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, params: Any, _ctx: Any, _many: bool) -> None:
        seen.append((statement, params))

    engine = store._engine
    event.listen(engine, "before_cursor_execute", capture)
    try:
        assert store.search(P, query, mode="keyword")
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    return seen


def test_postgres_substring_search_uses_the_trigram_index(filled: tuple[Store, LocalPostgres, str]) -> None:
    store, _server, _name = filled
    with store._engine.connect() as conn:
        options: dict[str, list[str]] = dict(
            conn.execute(
                text(
                    "SELECT relname, reloptions FROM pg_class "
                    "WHERE relname IN ('messages_tsv', 'messages_trgm')"
                )
            ).all()
        )
    # Both GIN indexes keep a small pending list, so a search never scans megabytes of queued entries.
    small = [f"gin_pending_list_limit={PENDING_KB}"]
    assert options == {"messages_tsv": small, "messages_trgm": small}
    statements = _statements(store, "rößenä")
    substring = [(sql, params) for sql, params in statements if "ILIKE" in sql]
    assert len(substring) == 1, statements
    sql, params = substring[0]
    with store._engine.connect() as conn:  # the driver's own statement and parameters, as the search ran them
        plan = "\n".join(row[0] for row in conn.exec_driver_sql("EXPLAIN " + sql, params))
    assert "messages_trgm" in plan, plan


def test_without_pg_trgm_substring_search_scans(
    postgres: LocalPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    """A role that may create tables but not extensions: the store opens, says so, and still finds them."""
    name = postgres.create_database()
    role = f"r_{name}"
    try:
        with _admin(postgres, name) as conn:
            conn.execute(f'CREATE ROLE "{role}" LOGIN'.encode())
            conn.execute(f'REVOKE CREATE ON DATABASE "{name}" FROM PUBLIC'.encode())
            conn.execute(f'GRANT CREATE ON SCHEMA public TO "{role}"'.encode())
        url = postgres.url(name).replace(f"://{SUPERUSER}@", f"://{role}@")
        with caplog.at_level(logging.INFO, logger="control_plane.store.engine"), Store(url) as store:
            _fill(store)
            _assert_found(store)
            with store._engine.connect() as conn:
                indexes = set(
                    conn.scalars(text("SELECT indexname FROM pg_indexes WHERE tablename = 'messages'"))
                )
        assert "messages_tsv" in indexes and "messages_trgm" not in indexes
        assert any("pg_trgm unavailable" in r.getMessage() for r in caplog.records), caplog.text
    finally:
        postgres.drop_database(name)
        with _admin(postgres, "postgres") as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"'.encode())


def _admin(server: LocalPostgres, dbname: str) -> psycopg.Connection[Any]:
    return psycopg.connect(host="127.0.0.1", port=server.port, user=SUPERUSER, dbname=dbname, autocommit=True)


def test_indexes_made_before_get_the_small_pending_list(postgres: LocalPostgres) -> None:
    name = postgres.create_database()
    try:
        with Store(postgres.url(name)) as store:
            _fill(store)
            with store._engine.begin() as conn:  # as a database made before PENDING_KB has them
                for index in ("messages_tsv", "messages_trgm"):
                    conn.execute(text(f"ALTER INDEX {index} RESET (gin_pending_list_limit)"))
        with Store(postgres.url(name)) as store, store._engine.connect() as conn:
            options = conn.scalars(
                text("SELECT reloptions FROM pg_class WHERE relname IN ('messages_tsv', 'messages_trgm')")
            ).all()
            assert options == [[f"gin_pending_list_limit={PENDING_KB}"]] * 2
            assert [_unmarked(h.snippet) for h in store.search(P, "BERLAU", mode="keyword")] == [TRICKY[3]]
    finally:
        postgres.drop_database(name)
