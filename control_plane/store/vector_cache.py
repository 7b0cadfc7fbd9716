"""A model's vectors held in memory by the Store and searched exactly there (vector_scan.py): SQLite's vec0
table and PostgreSQL's bytea fallback (pgvector's tables are searched by their HNSW index in the server).

Kept current cheaply: each search reads the model's row of vector_indexes (its table, when the table was made,
and the indexer's cursor) in the query that looks the table up. Whichever process indexes writes vectors in
id order behind that cursor, in the cursor's transaction, so the copy loads only the ids between the highest
it holds and the cursor. A table made anew (the model changed and back) is a new copy. A message deleted
since (its vector went with it, by trigger or foreign key) shows up as a hit whose row is gone: the copy
forgets it and the next best is taken. Profile, role, dates and the excluded session are answered from the
copy; the session's source, which may change, from the rows loaded for the hits.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from sqlalchemy import Connection, bindparam, text

from .indexer import INDEXABLE
from .records import SearchHit
from .search import Filters
from .semantic import semantic_hit
from .vector_scan import Column, Matrix
from .vectors import neighbours_wanted, uses_pgvector

POINT_LOOKUPS = 2000
"""New vectors up to this many are read from vec0 one rowid each (0.05 ms apiece); more, by one scan of the
table (about 1.2 s for 100,000): vec0 answers a rowid range only by scanning."""
WIDEN = 4
"""When filters or one hit per session leave too few of the k nearest, k grows this many times."""


class VectorCaches:
    """A Store's copies, one a model table, and which of its PostgreSQL tables are pgvector's (fixed when
    the table is made)."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self._copies: dict[str, VectorCache] = {}
        self._pgvector: dict[tuple[str, float], bool] = {}

    def pgvector(self, conn: Connection, table: str, made: float) -> bool:
        if self.dialect != "postgresql":
            return False
        if (table, made) not in self._pgvector:
            self._pgvector[(table, made)] = uses_pgvector(conn, table)
        return self._pgvector[(table, made)]

    def cache(self, table: str, made: float) -> VectorCache:
        copy = self._copies.get(table)
        if copy is None or copy.made != made:  # the model changed away and back: a new table
            copy = self._copies[table] = VectorCache(self.dialect, table, made)
        return copy


class VectorCache:
    def __init__(self, dialect: str, table: str, made: float) -> None:
        self.dialect, self.table, self.made = dialect, table, made
        self._lock = threading.Lock()
        self.seen = 0
        self._matrix: Matrix | None = None
        self._ids = Column(np.int64)
        self._created = Column(np.float64)
        self._profiles = Column(np.int32)
        self._roles = Column(np.int32)
        self._sessions = Column(np.int32)
        self._alive = Column(np.bool_)
        self._codes: dict[str, int] = {}

    @property
    def nbytes(self) -> int:
        columns = (self._ids, self._created, self._profiles, self._roles, self._sessions, self._alive)
        return sum(c.nbytes for c in columns) + (self._matrix.nbytes if self._matrix else 0)

    def _code(self, value: str) -> int:
        return self._codes.setdefault(value, len(self._codes))

    # loading

    def refresh(self, conn: Connection, through: int) -> None:
        """Load the vectors with ids above those held, up to the indexer's cursor `through`."""
        with self._lock:
            if through <= self.seen:
                return
            rows = self._new_rows(conn, through)
            if rows:
                vectors = np.stack([np.frombuffer(bytes(r[5]), dtype=np.float32) for r in rows])
                if self._matrix is None:
                    self._matrix = Matrix(vectors.shape[1])
                self._matrix.append(vectors)
                self._ids.extend(np.array([r[0] for r in rows], np.int64))
                self._profiles.extend(np.array([self._code(r[1]) for r in rows], np.int32))
                self._roles.extend(np.array([self._code(r[2]) for r in rows], np.int32))
                self._created.extend(np.array([r[3] for r in rows], np.float64))
                self._sessions.extend(np.array([self._code(r[4]) for r in rows], np.int32))
                self._alive.extend(np.ones(len(rows), np.bool_))
            self.seen = through

    def _new_rows(self, conn: Connection, through: int) -> list[Any]:
        """(id, profile, role, created_at, session id, vector bytes) of the new vectors, in id order."""
        span = {"seen": self.seen, "through": through}
        if self.dialect == "postgresql":
            sql = (
                f"SELECT v.message_id, v.profile, v.role, v.created_at, m.session_id, v.embedding "
                f"FROM {self.table} v JOIN messages m ON m.id = v.message_id "
                "WHERE v.message_id > :seen AND v.message_id <= :through ORDER BY v.message_id"
            )
            return list(conn.execute(text(sql), span))
        rows = conn.execute(
            text(
                "SELECT m.id, s.profile, m.role, m.created_at, m.session_id FROM messages m "
                "JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.id > :seen AND m.id <= :through AND {INDEXABLE} ORDER BY m.id"
            ),
            span,
        ).all()
        if len(rows) <= POINT_LOOKUPS:
            point = f"SELECT embedding FROM {self.table} WHERE rowid = ?"
            vectors = {r[0]: conn.exec_driver_sql(point, (r[0],)).scalar() for r in rows}
        else:
            scan = conn.exec_driver_sql(f"SELECT rowid, embedding FROM {self.table}")
            vectors = {i: v for i, v in scan if self.seen < i <= through}
        return [(*r, vectors[r[0]]) for r in rows if vectors.get(r[0]) is not None]

    def _forget(self, ids: list[int]) -> None:
        with self._lock:
            positions = np.searchsorted(self._ids.values, ids)
            self._alive.values[positions] = False

    # searching

    def _nearest(self, query: Any, where: Filters, k: int) -> tuple[list[tuple[int, float, int]], bool]:
        """(id, similarity, session code) of the k nearest that pass the filters the copy answers, nearest
        first, and whether there may be more."""
        with self._lock:
            if self._matrix is None or where.profile not in self._codes:
                return [], False
            allowed = self._alive.values & (self._profiles.values == self._codes[where.profile])
            if where.role is not None:
                allowed &= self._roles.values == self._codes.get(where.role, -1)
            if where.since is not None:
                allowed &= self._created.values >= where.since
            if where.until is not None:
                allowed &= self._created.values <= where.until
            if (excluded := where.params.get("exclude_session")) in self._codes:
                allowed &= self._sessions.values != self._codes[excluded]
            positions, scores = self._matrix.nearest(query, allowed, k)
            ids, sessions = self._ids.values[positions], self._sessions.values[positions]
            found = [(int(i), float(s), int(c)) for i, s, c in zip(ids, scores, sessions, strict=True)]
            return found, len(found) == k

    def hits(self, conn: Connection, query: Any, where: Filters, floor: float) -> list[SearchHit]:
        """SearchHits of the nearest messages at least `floor` similar, nearest first, at most `limit`: one
        per session with per_session."""
        limit, k = int(where.params["limit"]), neighbours_wanted(where)
        rows: dict[int, Any] = {}
        while True:
            nearest, more = self._nearest(query, where, k)
            kept = [n for n in nearest if n[1] >= floor]
            hits = self._pick(conn, kept, where, rows)
            if len(hits) >= limit or not more or len(kept) < len(nearest):
                return hits
            k *= WIDEN

    def _pick(
        self, conn: Connection, nearest: list[tuple[int, float, int]], where: Filters, rows: dict[int, Any]
    ) -> list[SearchHit]:
        """The first `limit` of `nearest` whose rows exist and pass the source filter (one per session with
        per_session), loading rows as needed into `rows` (id -> row, or None: deleted)."""
        limit, source = int(where.params["limit"]), where.params.get("source")
        while True:
            chosen: list[tuple[int, float]] = []
            sessions: set[int] = set()
            for message_id, score, session in nearest:
                if message_id in rows:
                    row = rows[message_id]
                    if row is None or (source is not None and row["source"] != source):
                        continue
                if where.per_session and session in sessions:
                    continue
                sessions.add(session)
                chosen.append((message_id, score))
                if len(chosen) == limit:
                    break
            todo = [i for i, _ in chosen if i not in rows]
            if not todo:
                return [semantic_hit(rows[i], score) for i, score in chosen]
            found = {int(r["id"]): r for r in _load(conn, todo)}
            rows.update({i: found.get(i) for i in todo})
            if gone := [i for i in todo if i not in found]:
                self._forget(gone)


def _load(conn: Connection, ids: list[int]) -> list[Any]:
    sql = text(
        "SELECT m.id, m.session_id, m.role, m.created_at, s.title AS session_title, s.source, m.content "
        "FROM messages m JOIN sessions s ON s.id = m.session_id WHERE m.id IN :ids"
    ).bindparams(bindparam("ids", expanding=True))
    return list(conn.execute(sql, {"ids": ids}).mappings())
