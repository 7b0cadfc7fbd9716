"""Opening a database (SQLite or PostgreSQL) and creating its schema and search indexes idempotently."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    bindparam,
    create_engine,
    event,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlmodel import SQLModel, col

from .dbapi import load_vec, sqlite_module
from .errors import StoreError
from .indexing import FTS_TABLES, INDEXED_THROUGH, UNINDEX_TRIGGER, migrate_v1
from .records import BindingRecord, StoreMeta, VectorIndexRecord  # noqa: F401 (their tables, for create_all)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 4
"""1: a trigger indexed each message as it was inserted. 2: SQLite indexes in bulk (indexing.py).
3: messages keep the model's reasoning (`reasoning`). 4: sessions record a mounted host `workspace`."""
WRITE = "hermetic_write"
"""Execution option on a connection whose transaction will write: SQLite begins it IMMEDIATE."""
BUSY_TIMEOUT_MS = 30_000

SQLITE_SEARCH_DDL = [
    *(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {t} USING fts5(content, content='messages', "
        f"content_rowid='id', {options})"
        for t, options in FTS_TABLES.items()
    ),
    UNINDEX_TRIGGER,
]
# The search query repeats this expression and predicate exactly, so the planner uses the index.
# GIN queues new entries in a pending list that every search scans linearly until it reaches its limit (4 MB
# by default) or (auto)vacuum merges it: right after 100,000 inserts that made searches several times slower
# (docs/performance.md). A small list keeps that scan short and still merges in bulk; without one
# (fastupdate = off) inserts were 8x slower.
PENDING_KB = 128
POSTGRES_SEARCH_DDL = [
    "CREATE INDEX IF NOT EXISTS messages_tsv ON messages "
    "USING gin (to_tsvector('simple', content)) "
    f"WITH (gin_pending_list_limit = {PENDING_KB}) WHERE role <> 'system'",
]
POSTGRES_TRIGRAM_DDL = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX IF NOT EXISTS messages_trgm ON messages USING gin (content gin_trgm_ops) "
    f"WITH (gin_pending_list_limit = {PENDING_KB}) WHERE role <> 'system'",
]


def open_engine(url: str) -> Engine:
    """An engine for `url`, connected once to prove it works, with the schema in place."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StoreError(
            f"not a database URL: {url!r}; use sqlite:///path/to/hermetic.db "
            "or postgresql+psycopg://user:password@host/dbname"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        engine = _sqlite_engine(parsed)
    elif backend == "postgresql":
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")  # the driver this package depends on
        try:
            engine = create_engine(parsed, pool_pre_ping=True)
        except NoSuchModuleError as exc:
            raise StoreError(f"{exc}: use postgresql+psycopg://...") from None
    else:
        raise StoreError(f"unsupported database {backend!r} in {_safe(parsed)}: use sqlite or postgresql")
    try:
        _create_schema(engine)
    except DBAPIError as exc:
        engine.dispose()
        raise StoreError(f"cannot open the database at {_safe(parsed)}: {_first_line(exc.orig)}") from exc
    except StoreError:
        engine.dispose()
        raise
    return engine


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that will write, committed when the block ends (rolled back on an
    exception). On SQLite the process's writers take turns on a lock first (_writer_turn), so none waits
    in SQLite's busy handler for another thread of this process."""
    turn = _writer_turns.get(engine)
    if turn is not None and not turn.acquire(timeout=BUSY_TIMEOUT_MS / 1000):
        raise StoreError(f"no turn to write within {BUSY_TIMEOUT_MS // 1000} s: the database is locked")
    try:
        with engine.connect().execution_options(**{WRITE: True}) as conn, conn.begin():
            yield conn
    finally:
        if turn is not None:
            turn.release()


def read_engine(engine: Engine) -> Engine:
    """The engine a store reads through. PostgreSQL: the same pool with each read statement in autocommit,
    as in READ COMMITTED each statement takes its own snapshot anyway; a read then costs no BEGIN and
    ROLLBACK round trips, and psycopg keeps the statements it prepares after their fifth run on a
    connection (a rollback deallocates them all), so the server stops parsing them again. SQLite: the
    engine itself, whose reads see one snapshot in a deferred transaction."""
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    return engine


_writer_turns: weakref.WeakKeyDictionary[Engine, threading.Lock] = weakref.WeakKeyDictionary()
_turns_by_file: dict[Path, threading.Lock] = {}
_turns_guard = threading.Lock()


def _writer_turn(path: Path) -> threading.Lock:
    """One SQLite file's write turn among this process's threads and engines (the Store, the gateway's,
    the scheduler's: each opens its own). A writer that finds SQLite's lock taken sleeps in its busy
    handler (1, 2, 5, 10 ... up to 100 ms a try) and misses the moment it frees; with twenty chats' stores
    and marks at once those sleeps made a message's store take 45 ms (median) and 537 ms (p90). On this
    lock the next writer is woken when the one before it has committed. Other processes still meet in
    the busy handler."""
    with _turns_guard:
        return _turns_by_file.setdefault(path.resolve(), threading.Lock())


def _sqlite_engine(url: URL) -> Engine:
    if not url.database or url.database == ":memory:":
        raise StoreError(
            f"{_safe(url)}: the store needs a database file (sqlite:///path/to/hermetic.db), "
            "since an in-memory database is private to one connection"
        )
    path = Path(url.database).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create the directory for {path}: {exc}") from None
    engine = create_engine(
        url.set(database=str(path)), module=sqlite_module(), connect_args={"check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # BEGIN is ours (below), not the sqlite3 module's
        load_vec(dbapi_connection)
        for pragma in (
            "journal_mode=WAL",
            "foreign_keys=ON",
            f"busy_timeout={BUSY_TIMEOUT_MS}",
            "synchronous=NORMAL",
        ):
            dbapi_connection.execute(f"PRAGMA {pragma}")

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        # A deferred transaction that reads and then writes cannot wait for a concurrent writer: SQLite
        # fails it with "database is locked" at once. Writes take the lock up front (waiting up to the
        # busy timeout); reads stay deferred and never block.
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE) else "BEGIN")

    _writer_turns[engine] = _writer_turn(path)
    return engine


SCHEMA_LOCK = "SELECT pg_advisory_xact_lock(hashtext('hermetic schema'))"
"""PostgreSQL: processes opening a new database at once would race CREATE ... IF NOT EXISTS (a duplicate
key in pg_type); each takes this lock first, in its schema transaction (SQLite's BEGIN IMMEDIATE does it)."""


def create_tables(engine: Engine, tables: list[Table]) -> None:
    """Create `tables` where missing, under the schema lock on PostgreSQL (replicas start at once)."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text(SCHEMA_LOCK))
        SQLModel.metadata.create_all(conn, tables=tables, checkfirst=True)


def _create_schema(engine: Engine) -> None:
    with write_transaction(engine) as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text(SCHEMA_LOCK))
        SQLModel.metadata.create_all(
            conn, tables=[SQLModel.metadata.tables[name] for name in _TABLES], checkfirst=True
        )
        found = conn.scalar(select(col(StoreMeta.value)).where(col(StoreMeta.key) == "schema_version"))
        sqlite = engine.dialect.name == "sqlite"
        if found is None:
            conn.execute(insert(StoreMeta).values(key="schema_version", value=str(SCHEMA_VERSION)))
            if sqlite:
                conn.execute(insert(StoreMeta).values(key=INDEXED_THROUGH, value="0"))
        elif int(found) > SCHEMA_VERSION:
            raise StoreError(
                f"the database has schema version {found}, newer than this Hermetic's ({SCHEMA_VERSION}): "
                "upgrade Hermetic"
            )
        elif int(found) < SCHEMA_VERSION:
            if sqlite and int(found) < 2:
                migrate_v1(conn)
            if int(found) < 3:  # the same DDL on both: a nullable column, no default to fill in
                conn.execute(text("ALTER TABLE messages ADD COLUMN reasoning TEXT"))
            if int(found) < 4:
                conn.execute(text("ALTER TABLE sessions ADD COLUMN workspace TEXT"))
            conn.execute(
                update(StoreMeta)
                .where(col(StoreMeta.key) == "schema_version")
                .values(value=str(SCHEMA_VERSION))
            )
            log.info("sessions database migrated from schema %s to %s", found, SCHEMA_VERSION)
        for ddl in SQLITE_SEARCH_DDL if sqlite else POSTGRES_SEARCH_DDL:
            conn.execute(text(ddl))
    if engine.dialect.name == "postgresql":
        _try_pg_trgm(engine)
        with engine.begin() as conn:
            _small_pending_lists(conn)


def _try_pg_trgm(engine: Engine) -> None:
    """pg_trgm indexes substring search when the extension is installed and we may create it."""
    try:
        with engine.begin() as conn:
            for ddl in POSTGRES_TRIGRAM_DDL:
                conn.execute(text(ddl))
    except DBAPIError as exc:
        log.info("pg_trgm unavailable (%s); substring search scans instead", _first_line(exc.orig))


GIN_INDEXES = ("messages_tsv", "messages_trgm")


def _small_pending_lists(conn: Connection) -> None:
    """Databases made before PENDING_KB: their indexes get the small list, what the old one holds merged."""
    queued = conn.scalars(
        text(
            "SELECT relname FROM pg_class WHERE relname IN :names AND relkind = 'i' "
            "AND pg_table_is_visible(oid) AND NOT coalesce(:option = ANY(reloptions), false)"
        ).bindparams(bindparam("names", expanding=True)),
        {"names": list(GIN_INDEXES), "option": f"gin_pending_list_limit={PENDING_KB}"},
    ).all()
    for name in queued:  # names from GIN_INDEXES only
        conn.execute(text(f"ALTER INDEX {name} SET (gin_pending_list_limit = {PENDING_KB})"))
        conn.execute(text("SELECT gin_clean_pending_list(CAST(:name AS regclass))"), {"name": name})
        log.info("search index %s: pending list merged and limited to %d kB", name, PENDING_KB)


# create_all adds the new ones to an existing database
_TABLES = [
    "sessions",
    "messages",
    "tool_calls",
    "store_meta",
    "vector_indexes",
    "eval_attempts",
    "conversation_bindings",
]


def _safe(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def _first_line(exc: BaseException | None) -> str:
    return str(exc).strip().splitlines()[0] if exc and str(exc).strip() else repr(exc)
