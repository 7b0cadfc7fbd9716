"""Message vectors, one table per embedding model, and nearest-neighbour search over them.

SQLite: a sqlite-vec `vec0` table in the same database file, partitioned by profile, with the role and
time as metadata; a trigger drops a message's vector in the transaction that deletes the message.
PostgreSQL with pgvector: a `vector` column with an HNSW index (approximate, cosine), searched in the
server. PostgreSQL without it (the fallback, see docs/recall-and-providers.md): vectors in a bytea column.
Either is deleted with its message by the foreign key. SQLite's and the fallback's vectors are searched
exactly in this process, over a copy kept in memory and extended incrementally (vector_cache.py).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import sqlite_vec
from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from .search import Filters

OVERFETCH = 8
"""Neighbours fetched per hit wanted: filters applied after the nearest search (the session's source, the
excluded session) and one-hit-per-session both drop some."""
MAX_K = 4096
"""The largest k asked for at first (sqlite-vec's largest; in memory, k then widens as needed)."""
HNSW_MAX_DIM = 2000
"""pgvector indexes vectors of at most this many dimensions; a larger model's are searched by a scan."""
EF_SEARCH_MAX = 1000
"""pgvector's largest hnsw.ef_search (candidates the index keeps while searching)."""

log = logging.getLogger(__name__)


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
            f"PostgreSQL with pgvector {pgvector}: vectors in a vector column, searched by an HNSW index "
            "(a model's vectors written before pgvector was installed stay in the fallback until it changes)"
        )
    return "PostgreSQL without pgvector: exact search in the control plane over vectors in a bytea column"


def uses_pgvector(conn: Connection, table: str) -> bool:
    """Whether `table` (PostgreSQL) keeps its vectors in a pgvector column rather than bytea."""
    kind = conn.scalar(
        text(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = to_regclass(:table) AND attname = 'embedding'"
        ),
        {"table": table},
    )
    return bool(kind) and not str(kind).startswith("bytea")


def _try_pgvector(conn: Connection) -> bool:
    """Whether the vector type is there, creating the extension if the server has it and we may."""
    if not conn.scalar(text("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")):
        return False
    try:
        with conn.begin_nested():  # a refused CREATE EXTENSION must not abort the indexer's transaction
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
        return True
    except DBAPIError as exc:
        log.info("pgvector is installed but cannot be enabled here (%s): exact search instead", exc.orig)
        return False


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
        pgvector = _try_pgvector(conn)
        column = f"vector({dim})" if pgvector else "bytea"
        conn.execute(
            text(
                f"CREATE TABLE IF NOT EXISTS {table} (message_id bigint PRIMARY KEY "
                "REFERENCES messages(id) ON DELETE CASCADE, profile text NOT NULL, role text NOT NULL, "
                f"created_at double precision NOT NULL, embedding {column} NOT NULL)"
            )
        )
        if pgvector and dim <= HNSW_MAX_DIM:
            hnsw = f"{table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)"
            conn.execute(text(f"CREATE INDEX IF NOT EXISTS {hnsw}"))


def drop_table(conn: Connection, dialect: str, table: str) -> None:
    if dialect == "sqlite":
        conn.execute(text(f"DROP TRIGGER IF EXISTS {table}_unindex"))
    conn.execute(text(f"DROP TABLE IF EXISTS {table}"))


def insert_vectors(conn: Connection, dialect: str, table: str, rows: list[Pending], vectors: Any) -> None:
    key = "rowid" if dialect == "sqlite" else "message_id"
    pgvector = dialect == "postgresql" and uses_pgvector(conn, table)
    params = [
        {
            "id": row.id,
            "profile": row.profile,
            "role": row.role,
            "created_at": row.created_at,
            "embedding": _literal(vector) if pgvector else np.asarray(vector, dtype=np.float32).tobytes(),
        }
        for row, vector in zip(rows, vectors, strict=True)
    ]
    value = "CAST(:embedding AS vector)" if pgvector else ":embedding"
    conn.execute(
        text(
            f"INSERT INTO {table}({key}, profile, role, created_at, embedding) "
            f"VALUES (:id, :profile, :role, :created_at, {value})"
        ),
        params,
    )


def _literal(vector: Any) -> str:
    """pgvector's text form of a vector: [x,y,...] (float32 values, shortest round-tripping repr)."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(vector, dtype=np.float32)) + "]"


def _metadata(where: Filters) -> str:
    """The filters a vector table's own columns answer, inside the nearest search."""
    inside = "profile = :profile"
    for name, clause in (
        ("role", "role = :role"),
        ("since", "created_at >= :since"),
        ("until", "created_at <= :until"),
    ):
        if name in where.params:
            inside += f" AND {clause}"
    return inside


def nearest_pgvector(conn: Connection, table: str, query: Any, where: Filters) -> list[tuple[int, float]]:
    """(message id, cosine similarity) of the nearest vectors that pass every filter, nearest first, by the
    HNSW index. Its iterative scan (pgvector 0.8) goes on past the first candidates while the profile, role
    or date filters leave fewer than k, so a filter does not starve the result; relaxed order is put right
    by the final sort."""
    k = neighbours_wanted(where)
    conn.execute(
        text(
            "SELECT set_config('hnsw.ef_search', :ef, true), "
            "set_config('hnsw.iterative_scan', 'relaxed_order', true)"
        ),
        {"ef": str(min(EF_SEARCH_MAX, k))},
    )
    inside = _metadata(where)
    sql = f"""
        WITH knn AS (
            SELECT message_id AS id, embedding <=> CAST(:vector AS vector) AS distance FROM {table}
            WHERE {inside} ORDER BY embedding <=> CAST(:vector AS vector) LIMIT :k
        )
        SELECT m.id, knn.distance FROM knn JOIN messages m ON m.id = knn.id
        JOIN sessions s ON s.id = m.session_id
        WHERE {where.sql} ORDER BY knn.distance, m.id DESC
    """
    params = {**where.params, "vector": _literal(query), "k": k}
    return [(int(row[0]), 1.0 - float(row[1])) for row in conn.execute(text(sql), params)]
