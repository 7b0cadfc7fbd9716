"""The sessions database: sessions, their messages in chat format, tool-call audit rows, and search."""

from __future__ import annotations

import logging
import secrets
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

from sqlalchemy import Connection, Engine, delete, insert, text, update
from sqlalchemy.exc import DataError, IntegrityError
from sqlmodel import Session, col, select

from ..recall.embeddings import Embedder
from .engine import open_engine, read_engine, write_transaction
from .errors import StoreError
from .indexer import VectorIndexer
from .indexing import BATCH, backlog, catch_up
from .planner_stats import PlannerStats
from .query import terms
from .records import (
    EvalAttemptRecord,
    MessageRecord,
    SearchHit,
    SessionRecall,
    SessionRecord,
    ToolCallRecord,
    message_row,
)
from .search import Filters, search_postgres, search_sqlite
from .semantic import DEPTH, SearchMode, fuse, semantic_hits
from .surroundings import Spot, surroundings
from .vector_cache import VectorCaches
from .vectors import nearest_pgvector

log = logging.getLogger(__name__)

UPDATABLE = frozenset(
    {"title", "source", "model", "backend", "sandbox_id", "workspace", "parent_id", "ended_at"}
)
"""Session fields update_session may set; ids, profile and totals are the store's."""
SEARCHABLE_ROLES = ("user", "assistant", "tool")
MAX_ROW = 2**63 - 1
"""The largest LIMIT/OFFSET both SQLite and PostgreSQL take (a signed 64-bit integer)."""


def new_session_id() -> str:
    """ "s-" + milliseconds since the epoch + random: unique, and sorts by creation time."""
    return f"s-{time.time_ns() // 1_000_000:012x}{secrets.token_hex(4)}"


def _shut(indexer: VectorIndexer | None, engine: Engine) -> None:
    if indexer:
        indexer.stop()
    engine.dispose()


class Store:
    """Thread-safe: each call takes its own pooled connection; writes run in one transaction each, reads
    in one on SQLite and statement by statement on PostgreSQL (engine.read_engine)."""

    def __init__(
        self,
        url: str,
        *,
        embedder: Embedder | None = None,
        embed_batch: int = 64,
        min_similarity: float = 0.0,
        background: bool = True,
    ) -> None:
        """With an embedder, messages are embedded in the background (backfilling what is there) and
        searches may be semantic or hybrid; semantic hits less similar than min_similarity are dropped.
        Without `background`, the caller runs the indexer (`hermetic sessions reindex`)."""
        self._engine = open_engine(url)
        self._reads = read_engine(self._engine)
        self.dialect: str = self._engine.dialect.name
        self.embedder = embedder
        self.min_similarity = min_similarity
        self.indexer = VectorIndexer(self._engine, embedder, embed_batch) if embedder else None
        self._vectors = VectorCaches(self.dialect)
        self._planner = PlannerStats(self._engine) if self.dialect == "postgresql" else None
        self.fence: Callable[[Connection, str], None] | None = None
        """With replicas: called in each transaction that adds a session's messages, before they are
        written; raises StoreError to refuse them (Leases.fence: the session is another replica's now)."""
        if self.indexer and background:
            self.indexer.start()
        # The indexer's thread holds the engine: a Store dropped without close() would keep its thread
        # and its connections for the life of the process. Collected, it stops them as close() does.
        self._finalizer = weakref.finalize(self, _shut, self.indexer, self._engine)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, for parts that keep tables of their own here (the scheduler's jobs)."""
        return self._engine

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # sessions

    def create_session(
        self,
        profile: str,
        *,
        title: str | None = None,
        model: str | None = None,
        backend: str | None = None,
        source: str = "cli",
        parent_id: str | None = None,
    ) -> SessionRecord:
        now = time.time()
        record = SessionRecord(
            id=new_session_id(),
            profile=profile,
            title=title,
            model=model,
            backend=backend,
            source=source,
            parent_id=parent_id,
            created_at=now,
            updated_at=now,
        )
        with self._write(f"create a session with parent {parent_id!r}") as conn:
            conn.execute(insert(SessionRecord).values(record.model_dump()))
        return record

    def label_eval_attempt(self, label: EvalAttemptRecord) -> None:
        """Record (or correct) which evaluation attempt a session was and the reward it earned."""
        with self._write(f"label session {label.session_id!r} as an evaluation attempt") as conn:
            conn.execute(
                delete(EvalAttemptRecord).where(col(EvalAttemptRecord.session_id) == label.session_id)
            )
            conn.execute(insert(EvalAttemptRecord).values(label.model_dump()))

    def get_session(self, session_id: str, profile: str) -> SessionRecord | None:
        """The session, or None when it does not exist or belongs to another profile."""
        query = select(SessionRecord).where(SessionRecord.id == session_id, SessionRecord.profile == profile)
        with self._read() as db:
            return db.exec(query).first()

    def list_sessions(
        self,
        profile: str,
        *,
        limit: int = 50,
        offset: int = 0,
        mounted: bool = False,
        workspace: str | None = None,
    ) -> list[SessionRecord]:
        """The profile's sessions, latest activity first; `mounted`: only those with a host workspace,
        `workspace`: only those on that directory."""
        query = select(SessionRecord).where(SessionRecord.profile == profile)
        if mounted:
            query = query.where(col(SessionRecord.workspace).is_not(None))
        if workspace is not None:
            query = query.where(SessionRecord.workspace == workspace)
        query = (
            query.order_by(col(SessionRecord.updated_at).desc(), col(SessionRecord.id).desc())
            .limit(min(max(limit, 0), MAX_ROW))
            .offset(min(max(offset, 0), MAX_ROW))
        )
        with self._read() as db:
            return list(db.exec(query))

    def update_session(self, session_id: str, **fields: Any) -> None:
        unknown = set(fields) - UPDATABLE
        if unknown:
            raise StoreError(
                f"cannot update session field(s) {', '.join(sorted(unknown))}; "
                f"updatable: {', '.join(sorted(UPDATABLE))}"
            )
        if not fields:
            return
        with self._write(f"update session {session_id!r}") as conn:
            done = conn.execute(
                update(SessionRecord).where(col(SessionRecord.id) == session_id).values(fields)
            )
            if done.rowcount == 0:
                raise StoreError(f"no session {session_id!r}")
            if self.fence is not None:
                self.fence(conn, session_id)

    def delete_session(self, session_id: str, profile: str) -> bool:
        """Delete the session with its messages and tool calls; False when the profile has no such session."""
        with self._write(f"delete session {session_id!r}") as conn:
            done = conn.execute(
                delete(SessionRecord).where(
                    col(SessionRecord.id) == session_id, col(SessionRecord.profile) == profile
                )
            )
            return done.rowcount > 0

    # messages

    def add_message(
        self,
        session_id: str,
        message: dict[str, Any],
        *,
        model: str | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        cost: float | None = None,
        reasoning: str | None = None,
    ) -> int:
        """Store one chat-format message (with the model's `reasoning`, if any); returns its id. The
        session's totals and activity time follow."""
        row = message_row(message, 0)
        row.update(model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, cost=cost)
        row["reasoning"] = reasoning or None
        return self._insert_messages(session_id, [row])[0]

    def add_messages(self, session_id: str, messages: Sequence[dict[str, Any]]) -> list[int]:
        """Store many chat-format messages in one transaction; returns their ids in order."""
        return self._insert_messages(session_id, [message_row(m, i) for i, m in enumerate(messages)])

    def _insert_messages(self, session_id: str, rows: list[dict[str, Any]]) -> list[int]:
        if not rows:
            return []
        now = time.time()
        for row in rows:
            row.update(session_id=session_id, created_at=now)
        totals = {
            "message_count": col(SessionRecord.message_count) + len(rows),
            "prompt_tokens": col(SessionRecord.prompt_tokens)
            + sum(r.get("prompt_tokens") or 0 for r in rows),
            "completion_tokens": col(SessionRecord.completion_tokens)
            + sum(r.get("completion_tokens") or 0 for r in rows),
            "cost": col(SessionRecord.cost) + sum(r.get("cost") or 0.0 for r in rows),
            "updated_at": now,
        }
        with self._write(f"add messages to session {session_id!r}") as conn:
            # The session row first: it proves the session exists and serializes writers to it.
            done = conn.execute(
                update(SessionRecord).where(col(SessionRecord.id) == session_id).values(totals)
            )
            if done.rowcount == 0:
                raise StoreError(f"no session {session_id!r}")
            if self.fence is not None:
                self.fence(conn, session_id)
            # Core executemany (multi-row INSERT ... RETURNING per batch), not ORM objects: inserts are hot.
            ids = conn.execute(
                insert(MessageRecord).returning(col(MessageRecord.id), sort_by_parameter_order=True), rows
            )
            if self.dialect == "sqlite" and backlog(conn) >= BATCH:
                catch_up(conn)
            added = cast(list[int], ids.scalars().all())
        if self._planner:
            self._planner.inserted(len(added))
        if self.indexer:
            self.indexer.notify()
        return added

    def messages(
        self, session_id: str, *, after_id: int | None = None, limit: int | None = None
    ) -> list[MessageRecord]:
        """The session's messages in order; after_id and limit page through them."""
        query = select(MessageRecord).where(MessageRecord.session_id == session_id)
        if after_id is not None:
            query = query.where(col(MessageRecord.id) > after_id)
        query = query.order_by(col(MessageRecord.id)).limit(limit)
        with self._read() as db:
            return list(db.exec(query))

    def history(self, session_id: str) -> list[dict[str, Any]]:
        """The conversation in OpenAI chat format, in order, ready to send to the model again."""
        return [m.to_chat() for m in self.messages(session_id)]

    # tool calls

    def record_tool_call(
        self,
        session_id: str,
        *,
        call_id: str,
        tool: str,
        arguments: Any,
        backend: str | None,
        sandbox_id: str | None,
        started_at: float,
        duration_ms: float,
        exit_code: int | None,
        ok: bool,
        error: str | None = None,
    ) -> int:
        row = {
            "session_id": session_id,
            "call_id": call_id,
            "tool": tool,
            "arguments": arguments,
            "backend": backend,
            "sandbox_id": sandbox_id,
            "started_at": started_at,
            "duration_ms": duration_ms,
            "exit_code": exit_code,
            "ok": ok,
            "error": error,
        }
        with self._write(f"record a tool call in session {session_id!r}") as conn:
            done = conn.execute(insert(ToolCallRecord).returning(col(ToolCallRecord.id)), row)
            return cast(int, done.scalar_one())

    def tool_calls(self, session_id: str) -> list[ToolCallRecord]:
        query = (
            select(ToolCallRecord)
            .where(ToolCallRecord.session_id == session_id)
            .order_by(col(ToolCallRecord.id))
        )
        with self._read() as db:
            return list(db.exec(query))

    # search

    def search(
        self,
        profile: str,
        query: str,
        *,
        limit: int = 20,
        exclude_session: str | None = None,
        role: str | None = None,
        per_session: bool = False,
        mode: SearchMode = "hybrid",
        source: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[SearchHit]:
        """The profile's messages best matching `query`, best first; with per_session, only each session's
        best message. keyword: messages containing every term (BM25); semantic: the nearest in meaning;
        hybrid: both fused by rank (keyword alone when semantic recall is off). Any text is safe here."""
        if role is not None and role not in SEARCHABLE_ROLES:
            raise StoreError(f"cannot search role {role!r}: one of {', '.join(SEARCHABLE_ROLES)}")
        words, depth = self._depth(query, mode, limit)
        if not depth:
            return []
        where = Filters(
            profile, exclude_session, role, depth, per_session, source=source, since=since, until=until
        )
        with self._reads.connect() as conn:
            return self._hits(conn, query, words, where, mode, limit)

    def _depth(self, query: str, mode: SearchMode, limit: int) -> tuple[list[str], int]:
        """The query's terms and how many hits each half looks for (0: there is nothing to find)."""
        if mode not in ("keyword", "semantic", "hybrid"):
            raise StoreError(f"unknown search mode {mode!r}: keyword, semantic or hybrid")
        if mode == "semantic" and self.embedder is None:
            raise StoreError("semantic search is off: set memory.embeddings.model (wordllama by default)")
        if not query.strip() or limit <= 0:
            return [], 0
        # Without a semantic half, hybrid is its keyword half: the same first `limit` hits (its order is
        # total), without a headline for DEPTH rows that fusion would not keep.
        fused = mode == "hybrid" and self.embedder is not None
        return terms(query), max(limit, DEPTH) if fused else limit

    def _hits(
        self, conn: Connection, query: str, words: list[str], where: Filters, mode: SearchMode, limit: int
    ) -> list[SearchHit]:
        """The keyword half on `conn`, the semantic half (in a transaction of its own), fused in hybrid."""
        keyword = self._keyword(conn, words, where) if mode != "semantic" and words else []
        semantic = self._semantic(query, where, strict=mode == "semantic") if mode != "keyword" else []
        if mode != "hybrid":
            return keyword or semantic
        return fuse(keyword, semantic, limit, where.per_session)

    def _keyword(self, conn: Connection, words: list[str], where: Filters) -> list[SearchHit]:
        if self.dialect == "sqlite":
            self._index_backlog()  # before `conn` reads: its transaction begins at its first statement
            return search_sqlite(conn, words, where)
        return search_postgres(conn, words, where)

    def _semantic(self, query: str, where: Filters, *, strict: bool) -> list[SearchHit]:
        """The nearest messages by the configured model's vectors; [] when nothing is embedded yet. The query
        failing to embed is an error in semantic mode and leaves hybrid to its keyword half."""
        if self.embedder is None:
            return []
        # A transaction: pgvector's scan settings are set for it alone (set_config's is_local). Committed,
        # not rolled back, as a rollback would also drop the statements psycopg prepared on the connection.
        with self._engine.begin() as conn:
            index = conn.execute(
                text(
                    "SELECT table_name, created_at, embedded_through FROM vector_indexes WHERE model = :model"
                ),
                {"model": self.embedder.model},
            ).one_or_none()
            if index is None:
                return []
            try:
                vector = self.embedder.embed([query])[0]
            except Exception as exc:
                if strict:
                    raise StoreError(f"cannot embed the query with {self.embedder.model}: {exc}") from exc
                log.warning("hybrid search without its semantic half: %s", exc)
                return []
            table, made, through = index
            if self._vectors.pgvector(conn, table, made):
                near = nearest_pgvector(conn, table, vector, where)
                return semantic_hits(conn, [n for n in near if n[1] >= self.min_similarity], where)
            cache = self._vectors.cache(table, made)
            cache.refresh(conn, int(through))
            return cache.hits(conn, vector, where, self.min_similarity)

    def recall(
        self,
        profile: str,
        query: str,
        *,
        limit: int = 5,
        exclude_session: str | None = None,
        window: int = 1,
        edges: int = 2,
        mode: SearchMode = "hybrid",
        source: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[SessionRecall]:
        """The sessions best matching `query`, best first, one entry each: the best hit, `window` messages
        either side of it, and the session's first and last `edges` exchange messages."""
        words, depth = self._depth(query, mode, limit)
        if not depth:
            return []
        where = Filters(profile, exclude_session, None, depth, True, source=source, since=since, until=until)
        # One connection for the search and what surrounds its hits: one checkout and pool ping, not two.
        with self._reads.connect() as conn:
            hits = self._hits(conn, query, words, where, mode, limit)
            if not hits:
                return []
            spots = [Spot(h.session_id, h.message_id, window, window) for h in hits]
            sessions = select(SessionRecord).where(col(SessionRecord.id).in_([h.session_id for h in hits]))
            around = surroundings(conn, spots, edges)
            known = {s.id: s for s in conn.execute(sessions)}
        return [
            SessionRecall(
                **hit.model_dump(),
                session_created_at=known[hit.session_id].created_at,
                message_count=known[hit.session_id].message_count,
                window=found.window,
                first=found.first,
                last=found.last,
            )
            for hit, found in zip(hits, around, strict=True)
            if hit.session_id in known  # not deleted since the search
        ]

    def context(
        self, message_id: int, profile: str, *, before: int = 2, after: int = 2
    ) -> list[MessageRecord]:
        """The message with up to `before` and `after` of its session's other messages (system prompts
        left out) either side, in order; [] when the profile has no such message."""
        query = (
            select(MessageRecord.session_id)
            .join(SessionRecord)
            .where(MessageRecord.id == message_id, SessionRecord.profile == profile)
        )
        with self._reads.connect() as conn:
            session_id = conn.execute(query).scalar()
            if session_id is None:
                return []
            return surroundings(conn, [Spot(session_id, message_id, before, after)], 0)[0].window

    def session_edges(self, session_id: str, n: int = 2) -> tuple[list[MessageRecord], list[MessageRecord]]:
        """The session's first `n` and last `n` user and assistant messages with text; the last never
        repeat the first."""
        with self._reads.connect() as conn:
            found = surroundings(conn, [Spot(session_id)], n)[0]
        return found.first, found.last

    # transactions

    def _index_backlog(self) -> None:
        """Bring SQLite's search indexes up to the latest message (a read when nothing waits)."""
        with self._reads.connect() as conn:
            waiting = backlog(conn)
        if waiting > 0:
            with self._write("index new messages for search") as conn:
                catch_up(conn)

    @contextmanager
    def _write(self, what: str) -> Iterator[Connection]:
        """One write transaction; the database refusing the data (a missing parent, a NUL byte in
        PostgreSQL text) becomes a StoreError naming what was being done, and nothing is written."""
        try:
            with write_transaction(self._engine) as conn:
                yield conn
        except (IntegrityError, DataError) as exc:
            raise StoreError(f"cannot {what}: {str(exc.orig).strip().splitlines()[0]}") from exc

    @contextmanager
    def _read(self) -> Iterator[Session]:
        # expire_on_commit=False: records stay readable after the session closes.
        with Session(self._reads, expire_on_commit=False) as db:
            yield db
