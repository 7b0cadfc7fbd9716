"""Message vectors, one table per embedding model, and nearest-neighbour search over them.

SQLite: a sqlite-vec `vec0` table in the same database file, partitioned by profile, with the role and
time as metadata so those filters apply inside the k-nearest search; a trigger drops a message's vector in
the transaction that deletes the message. PostgreSQL without pgvector (the fallback, see
docs/recall-and-providers.md): vectors in a bytea column (deleted with their message by the foreign key),
searched exactly in this process over a copy kept in memory and extended incrementally (pg_cache.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlite_vec
from sqlalchemy import Connection, Engine, text

from .search import Filters

OVERFETCH = 8
"""Neighbours fetched per hit wanted: filters applied after the nearest search (the session's source, the
excluded session) and one-hit-per-session both drop some."""
MAX_K = 4096
"""sqlite-vec's largest k."""


@dataclass
class Pending:
    """A message to embed."""

    id: int
    profile: str
    role: str
    created_at: float
    content: str


def vector_storage(engine: Engine) -> str:
    """Where this database keeps vectors and how it searches them, for `hermetic doctor`."""
    if engine.dialect.name == "sqlite":
        return f"sqlite-vec {sqlite_vec.__version__} in the database file"
    with engine.connect() as conn:
        pgvector = conn.scalar(
            text("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
        )
    if pgvector:
        return (
            f"PostgreSQL has pgvector {pgvector}, which Hermetic does not use yet: exact search in the "
            "control plane over vectors in a bytea column"
        )
    return "PostgreSQL without pgvector: exact search in the control plane over vectors in a bytea column"


def table_name(model: str) -> str:
    """A table name for `model`'s vectors: any text may name a model, so the name is a digest of it."""
    return "message_vectors_" + hashlib.sha256(model.encode()).hexdigest()[:12]


def neighbours_wanted(where: Filters) -> int:
    return min(MAX_K, max(int(where.params["limit"]) * OVERFETCH, 64))


def create_table(conn: Connection, dialect: str, table: str, dim: int) -> None:
    if dialect == "sqlite":
        conn.execute(
            text(
                f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING vec0(profile text partition key, "
                f"embedding float[{dim}] distance_metric=cosine, role text, created_at float)"
            )
        )
        conn.execute(
            text(
                f"CREATE TRIGGER IF NOT EXISTS {table}_unindex AFTER DELETE ON messages BEGIN "
                f"DELETE FROM {table} WHERE rowid = old.id; END"
            )
        )
    else:
        conn.execute(
            text(
                f"CREATE TABLE IF NOT EXISTS {table} (message_id bigint PRIMARY KEY "
                "REFERENCES messages(id) ON DELETE CASCADE, profile text NOT NULL, role text NOT NULL, "
                "created_at double precision NOT NULL, embedding bytea NOT NULL)"
            )
        )


def drop_table(conn: Connection, dialect: str, table: str) -> None:
    if dialect == "sqlite":
        conn.execute(text(f"DROP TRIGGER IF EXISTS {table}_unindex"))
    conn.execute(text(f"DROP TABLE IF EXISTS {table}"))


def insert_vectors(conn: Connection, dialect: str, table: str, rows: list[Pending], vectors: Any) -> None:
    key = "rowid" if dialect == "sqlite" else "message_id"
    params = [
        {
            "id": row.id,
            "profile": row.profile,
            "role": row.role,
            "created_at": row.created_at,
            "embedding": np.asarray(vector, dtype=np.float32).tobytes(),
        }
        for row, vector in zip(rows, vectors, strict=True)
    ]
    conn.execute(
        text(
            f"INSERT INTO {table}({key}, profile, role, created_at, embedding) "
            "VALUES (:id, :profile, :role, :created_at, :embedding)"
        ),
        params,
    )


def nearest_sqlite(conn: Connection, table: str, query: Any, where: Filters) -> list[tuple[int, float]]:
    """(message id, cosine similarity) of the nearest vectors that pass every filter, nearest first."""
    inside = "embedding MATCH :vector AND k = :k AND profile = :profile"
    params: dict[str, Any] = {
        **where.params,
        "vector": np.asarray(query, dtype=np.float32).tobytes(),
        "k": neighbours_wanted(where),
    }
    for name, clause in (
        ("role", "role = :role"),
        ("since", "created_at >= :since"),
        ("until", "created_at <= :until"),
    ):
        if name in where.params:
            inside += f" AND {clause}"
    sql = f"""
        WITH knn AS (SELECT rowid AS id, distance FROM {table} WHERE {inside})
        SELECT m.id, knn.distance FROM knn JOIN messages m ON m.id = knn.id
        JOIN sessions s ON s.id = m.session_id
        WHERE {where.sql} ORDER BY knn.distance, m.id DESC
    """
    return [(int(row[0]), 1.0 - float(row[1])) for row in conn.execute(text(sql), params)]


def check_ids(
    conn: Connection, candidates: list[tuple[int, float]], where: Filters
) -> list[tuple[int, float]]:
    """The candidates (nearest first) that still exist and pass every filter, in the same order."""
    if not candidates:
        return []
    params: dict[str, Any] = {**where.params, **{f"c{i}": c for i, (c, _) in enumerate(candidates)}}
    ids = ", ".join(f":c{i}" for i in range(len(candidates)))
    sql = "SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_id "
    sql += f"WHERE m.id IN ({ids}) AND {where.sql}"
    kept = {int(row[0]) for row in conn.execute(text(sql), params)}
    return [c for c in candidates if c[0] in kept]
