"""Full-text search over messages: SQLite FTS5 (words, then trigram substrings) or PostgreSQL text search.

Both dialects: every term required, hits limited to one profile's sessions, best first; CJK text (which
has no spaces to split words on) and words found only inside longer words go to substring search.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from .query import fts5_match, has_cjk, mark, websearch
from .records import SearchHit

SNIPPET_TOKENS = 24
PG_HEADLINE = (
    'StartSel=">>>", StopSel="<<<", MaxWords=30, MinWords=12, MaxFragments=2, FragmentDelimiter=" ... "'
)
TRIGRAM = 3
"""A trigram index finds terms of at least this many characters; shorter ones are matched with LIKE."""


class Filters:
    """The WHERE clauses every search shares: profile, and optionally not one session, only one role."""

    def __init__(self, profile: str, exclude_session: str | None, role: str | None, limit: int) -> None:
        self.params: dict[str, Any] = {"profile": profile, "limit": limit}
        self.sql = "s.profile = :profile AND m.role <> 'system'"
        if exclude_session is not None:
            self.sql += " AND m.session_id <> :exclude_session"
            self.params["exclude_session"] = exclude_session
        if role is not None:
            self.sql += " AND m.role = :role"
            self.params["role"] = role


def search_sqlite(conn: Connection, words: list[str], where: Filters) -> list[SearchHit]:
    if has_cjk(" ".join(words)):
        return _sqlite_trigram(conn, words, where)
    hits = _fts5(conn, "messages_fts", words, [], where)
    if not hits and all(len(w) >= TRIGRAM for w in words):
        hits = _fts5(conn, "messages_trigram", words, [], where)
    return hits


def _sqlite_trigram(conn: Connection, words: list[str], where: Filters) -> list[SearchHit]:
    long = [w for w in words if len(w) >= TRIGRAM]
    short = [w for w in words if len(w) < TRIGRAM]
    if not long:
        return _substring(conn, "LIKE", words, where)
    return _fts5(conn, "messages_trigram", long, short, where)


def _fts5(conn: Connection, table: str, words: list[str], like: list[str], where: Filters) -> list[SearchHit]:
    """Hits ranked by bm25 from one FTS5 index (`table` is one of ours, never user input)."""
    like_sql, params = _likes("LIKE", like)
    # Rank and cut first, then build snippets for the few rows kept.
    sql = f"""
        SELECT m.id AS message_id, m.session_id, m.role, m.created_at, s.title AS session_title, top.score,
               snippet({table}, 0, '>>>', '<<<', '...', {SNIPPET_TOKENS}) AS snippet
        FROM (
            SELECT {table}.rowid AS id, -bm25({table}) AS score
            FROM {table} JOIN messages m ON m.id = {table}.rowid JOIN sessions s ON s.id = m.session_id
            WHERE {table} MATCH :match AND {where.sql}{like_sql}
            ORDER BY bm25({table}) LIMIT :limit
        ) AS top
        JOIN {table} ON {table}.rowid = top.id JOIN messages m ON m.id = top.id
        JOIN sessions s ON s.id = m.session_id
        WHERE {table} MATCH :match
        ORDER BY top.score DESC, m.id DESC
    """
    rows = conn.execute(text(sql), {**where.params, **params, "match": fts5_match(words)}).mappings()
    return [SearchHit.model_validate(dict(row)) for row in rows]


def search_postgres(conn: Connection, words: list[str], where: Filters) -> list[SearchHit]:
    if has_cjk(" ".join(words)):
        return _substring(conn, "ILIKE", words, where)
    # The expression and predicate match the messages_tsv index exactly. Headlines only for the rows kept.
    sql = f"""
        SELECT top.id AS message_id, top.session_id, top.role, top.created_at, top.session_title, top.score,
               ts_headline('simple', top.content, top.q, :headline) AS snippet
        FROM (
            SELECT m.id, m.session_id, m.role, m.created_at, s.title AS session_title, m.content, q.q,
                   ts_rank(to_tsvector('simple', m.content), q.q) AS score
            FROM messages m JOIN sessions s ON s.id = m.session_id,
                 websearch_to_tsquery('simple', :query) AS q(q)
            WHERE to_tsvector('simple', m.content) @@ q.q AND {where.sql}
            ORDER BY score DESC, m.id DESC LIMIT :limit
        ) AS top
        ORDER BY top.score DESC, top.id DESC
    """
    params = {**where.params, "query": websearch(words), "headline": PG_HEADLINE}
    hits = [SearchHit.model_validate(dict(row)) for row in conn.execute(text(sql), params).mappings()]
    if not hits and all(len(w) >= TRIGRAM for w in words):
        hits = _substring(conn, "ILIKE", words, where)
    return hits


def _substring(conn: Connection, op: str, words: list[str], where: Filters) -> list[SearchHit]:
    """Messages containing every term anywhere, latest first (no rank: score 0). pg_trgm indexes ILIKE."""
    like_sql, params = _likes(op, words)
    sql = f"""
        SELECT m.id, m.session_id, m.role, m.created_at, s.title AS session_title, m.content
        FROM messages m JOIN sessions s ON s.id = m.session_id
        WHERE {where.sql}{like_sql}
        ORDER BY m.id DESC LIMIT :limit
    """
    rows = conn.execute(text(sql), {**where.params, **params}).mappings()
    return [
        SearchHit(
            session_id=row["session_id"],
            message_id=row["id"],
            role=row["role"],
            snippet=mark(row["content"], words),
            score=0.0,
            created_at=row["created_at"],
            session_title=row["session_title"],
        )
        for row in rows
    ]


def _likes(op: str, words: list[str]) -> tuple[str, dict[str, str]]:
    """` AND m.content LIKE :like0 ...` requiring each word as a substring, with its parameters."""
    sql = "".join(f" AND m.content {op} :like{i} ESCAPE '\\'" for i in range(len(words)))
    return sql, {f"like{i}": "%" + _escape_like(w) + "%" for i, w in enumerate(words)}


def _escape_like(word: str) -> str:
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
