"""PostgreSQL without pgvector: exact nearest-neighbour search over an in-memory copy of a model's vectors.

The copy is loaded once per process and then extended by the rows above the highest id it holds (vectors are
written in id order behind the indexer's cursor, so nothing lands below it). A message deleted since shows
up as a neighbour that no longer exists: the caller drops it and the copy is reloaded on the next search.
Memory: 4 bytes a dimension a message (1 KB for WordLlama's 256 dimensions).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
from sqlalchemy import Connection, text

from .search import Filters
from .vectors import check_ids, neighbours_wanted


class VectorCopy:
    def __init__(self, table: str) -> None:
        self.table = table
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.seen = 0
        self.ids = np.zeros(0, np.int64)
        self.created = np.zeros(0, np.float64)
        self.profiles = np.zeros(0, np.int32)
        self.roles = np.zeros(0, np.int32)
        self.matrix: np.ndarray[Any, np.dtype[np.float32]] | None = None
        self._codes: dict[str, int] = {}

    def invalidate(self) -> None:
        with self._lock:
            self._reset()

    def _code(self, value: str) -> int:
        return self._codes.setdefault(value, len(self._codes))

    def _extend(self, conn: Connection) -> None:
        rows = conn.execute(
            text(
                f"SELECT message_id, profile, role, created_at, embedding FROM {self.table} "
                "WHERE message_id > :seen ORDER BY message_id"
            ),
            {"seen": self.seen},
        ).all()
        if not rows:
            return
        vectors = np.stack([np.frombuffer(bytes(r[4]), dtype=np.float32) for r in rows])
        self.matrix = vectors if self.matrix is None else np.concatenate([self.matrix, vectors])
        self.ids = np.concatenate([self.ids, np.array([r[0] for r in rows], np.int64)])
        self.profiles = np.concatenate([self.profiles, np.array([self._code(r[1]) for r in rows], np.int32)])
        self.roles = np.concatenate([self.roles, np.array([self._code(r[2]) for r in rows], np.int32)])
        self.created = np.concatenate([self.created, np.array([r[3] for r in rows], np.float64)])
        self.seen = int(self.ids[-1])

    def nearest(self, conn: Connection, query: Any, where: Filters) -> list[tuple[int, float]]:
        """(message id, cosine similarity) of the nearest vectors that pass every filter, nearest first."""
        with self._lock:
            self._extend(conn)
            if self.matrix is None or where.profile not in self._codes:
                return []
            mask = self.profiles == self._codes[where.profile]
            if where.role is not None:
                mask &= self.roles == self._codes.get(where.role, -1)
            if where.since is not None:
                mask &= self.created >= where.since
            if where.until is not None:
                mask &= self.created <= where.until
            # One product over every row, the filtered-out ones then pushed last: cheaper than copying
            # the filtered rows out of the matrix first.
            scores = self.matrix @ np.asarray(query, dtype=np.float32)
            scores[~mask] = -np.inf
            k = min(neighbours_wanted(where), int(mask.sum()))
            if not k:
                return []
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top], kind="stable")]
            candidates = [(int(self.ids[i]), float(scores[i])) for i in top]
        kept = check_ids(conn, candidates, where)
        if len(kept) < len(candidates) and _any_deleted(conn, candidates, kept):
            self.invalidate()
        return kept


def _any_deleted(
    conn: Connection, candidates: list[tuple[int, float]], kept: list[tuple[int, float]]
) -> bool:
    """Whether some candidate dropped by the filters is gone from the table (its message was deleted)."""
    dropped = sorted({c for c, _ in candidates} - {c for c, _ in kept})
    params = {f"d{i}": d for i, d in enumerate(dropped)}
    sql = f"SELECT count(*) FROM messages WHERE id IN ({', '.join(f':d{i}' for i in range(len(dropped)))})"
    return int(conn.scalar(text(sql), params) or 0) < len(dropped)
