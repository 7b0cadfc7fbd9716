"""Embedding messages into the configured model's vector table, batch by batch, behind a resumable cursor.

Off the turn's critical path: a message is committed first and embedded later by a background thread that
add_messages wakes, so an embedding model that is slow, down or wrong never loses or delays a message. Each
batch's vectors and the cursor's advance commit in one transaction, so a process killed at any point
resumes after the last batch it committed, and an existing database is backfilled the same way.

Which messages lie behind the cursor: SQLite has one writer, so ids commit in order. PostgreSQL ids may
commit out of order (a sequence hands them out before commit): the read takes a SHARE lock on messages,
which waits for the transactions inserting into it, so every id at or below the highest one read has
committed. Inserts wait only for that short read, never for the embedding.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

from ..recall.embeddings import Embedder, EmbeddingError
from .engine import write_transaction
from .vectors import Pending, create_table, drop_table, insert_vectors, table_name

log = logging.getLogger(__name__)

INDEXABLE = "m.role <> 'system' AND m.content IS NOT NULL AND m.content <> ''"
RETRY_FIRST, RETRY_MAX = 1.0, 300.0
"""Seconds before retrying after a failed batch, doubling up to the most."""


@dataclass(frozen=True)
class Progress:
    model: str
    done: int
    """Indexable messages at or below the cursor."""
    total: int
    """Indexable messages in the database."""


class VectorIndexer:
    def __init__(self, engine: Engine, embedder: Embedder, batch: int) -> None:
        self._engine = engine
        self.dialect = engine.dialect.name
        self.embedder = embedder
        self.batch = batch
        self.last_error: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._moved = threading.Condition()
        self._thread: threading.Thread | None = None

    # one batch

    def step(self) -> int:
        """Embed and store the next batch after the cursor; returns how many messages it held (0: caught
        up). Raises EmbeddingError (or what the model raised) with nothing written."""
        model = self.embedder.model
        with self._engine.connect() as conn, conn.begin():
            if self.dialect == "postgresql":
                conn.execute(text("LOCK TABLE messages IN SHARE MODE"))
            through = self._cursor(conn, model)
            rows = [
                Pending(*row)
                for row in conn.execute(
                    text(
                        "SELECT m.id, s.profile, m.role, m.created_at, m.content FROM messages m "
                        f"JOIN sessions s ON s.id = m.session_id WHERE m.id > :through AND {INDEXABLE} "
                        "ORDER BY m.id LIMIT :batch"
                    ),
                    {"through": through or 0, "batch": self.batch},
                )
            ]
        if not rows:
            return 0
        vectors = self.embedder.embed([row.content for row in rows])
        if vectors.ndim != 2 or len(vectors) != len(rows):
            raise EmbeddingError(f"{model} answered {vectors.shape} vectors for {len(rows)} texts")
        with write_transaction(self._engine) as conn:
            if self.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:model))"), {"model": model})
            now = self._cursor(conn, model)
            if now != through:
                return len(rows)  # another process indexed this batch meanwhile
            dim = int(vectors.shape[1])
            if now is None:
                self._create(conn, model, dim)
            elif (held := self._dim(conn, model)) != dim:
                raise EmbeddingError(f"{model} answered {dim} dimensions; its index holds {held}")
            alive = self._still_there(conn, [row.id for row in rows])
            kept = [(row, vector) for row, vector in zip(rows, vectors, strict=True) if row.id in alive]
            if kept:
                insert_vectors(
                    conn, self.dialect, table_name(model), [r for r, _ in kept], [v for _, v in kept]
                )
            conn.execute(
                text("UPDATE vector_indexes SET embedded_through = :id WHERE model = :model"),
                {"id": rows[-1].id, "model": model},
            )
            if rows[-1].id >= self._last(conn):
                self._retire_others(conn, model)
        with self._moved:
            self._moved.notify_all()
        return len(rows)

    def progress(self) -> Progress:
        model = self.embedder.model
        with self._engine.connect() as conn:
            through = self._cursor(conn, model) or 0
            done = "CASE WHEN m.id <= :through THEN 1 ELSE 0 END"
            counts = conn.execute(
                text(f"SELECT count(*), sum({done}) FROM messages m WHERE {INDEXABLE}"), {"through": through}
            ).one()
        return Progress(model, int(counts[1] or 0), int(counts[0] or 0))

    def _cursor(self, conn: Connection, model: str) -> int | None:
        found = conn.scalar(
            text("SELECT embedded_through FROM vector_indexes WHERE model = :model"), {"model": model}
        )
        return None if found is None else int(found)

    def _dim(self, conn: Connection, model: str) -> int:
        return int(conn.scalar(text("SELECT dim FROM vector_indexes WHERE model = :model"), {"model": model}))

    def _create(self, conn: Connection, model: str, dim: int) -> None:
        create_table(conn, self.dialect, table_name(model), dim)
        conn.execute(
            text(
                "INSERT INTO vector_indexes(model, table_name, dim, embedded_through, created_at) "
                "VALUES (:model, :table, :dim, 0, :now)"
            ),
            {"model": model, "table": table_name(model), "dim": dim, "now": time.time()},
        )

    def _still_there(self, conn: Connection, ids: list[int]) -> set[int]:
        params = {f"i{n}": i for n, i in enumerate(ids)}
        placeholders = ", ".join(f":i{n}" for n in range(len(ids)))
        return {
            int(r[0])
            for r in conn.execute(text(f"SELECT id FROM messages WHERE id IN ({placeholders})"), params)
        }

    def _last(self, conn: Connection) -> int:
        """The id of the latest indexable message."""
        return int(conn.scalar(text(f"SELECT coalesce(max(m.id), 0) FROM messages m WHERE {INDEXABLE}")) or 0)

    def _retire_others(self, conn: Connection, model: str) -> None:
        """Once this model's index has caught up, the vectors of models used before it go, in the
        transaction that caught up."""
        others = list(
            conn.execute(
                text("SELECT model, table_name FROM vector_indexes WHERE model <> :model"), {"model": model}
            )
        )
        for old_model, table in others:
            drop_table(conn, self.dialect, table)
            conn.execute(text("DELETE FROM vector_indexes WHERE model = :model"), {"model": old_model})
            log.info("dropped the vectors of %s: %s has caught up", old_model, model)

    # the background thread

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hermetic-vector-indexer", daemon=True)
            self._thread.start()

    def notify(self) -> None:
        """New messages wait: index them soon (returns at once)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)  # (a Store collected by this thread's own GC run stops it too)

    def wait_caught_up(self, timeout: float) -> bool:
        """Whether every indexable message committed now has its vector within `timeout` seconds."""
        with self._engine.connect() as conn:
            last = int(
                conn.scalar(text(f"SELECT coalesce(max(m.id), 0) FROM messages m WHERE {INDEXABLE}")) or 0
            )
        deadline = time.monotonic() + timeout
        with self._moved:
            while True:
                with self._engine.connect() as conn:
                    if (self._cursor(conn, self.embedder.model) or 0) >= last:
                        return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._wake.set()
                self._moved.wait(remaining)

    def _run(self) -> None:
        delay = RETRY_FIRST
        while not self._stop.is_set():
            self._wake.clear()
            try:
                if self.step():
                    delay = RETRY_FIRST
                    self.last_error = None
                    continue
            except Exception as exc:  # a failed batch is retried later; messages are already safe
                self.last_error = str(exc) or repr(exc)
                log.warning(
                    "embedding messages with %s failed (retry in %.0f s): %s", self.embedder.model, delay, exc
                )
                self._wake.wait(delay)
                delay = min(delay * 2, RETRY_MAX)
                continue
            self._wake.wait()
