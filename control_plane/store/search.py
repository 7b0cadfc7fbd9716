"""Full-text search over messages: SQLite FTS5 (words, then trigram substrings) or PostgreSQL text search.

Both dialects: every term required, hits limited to one profile's sessions. Word hits come best first
(bm25, ts_rank). CJK text (no spaces to split words on), and terms found only inside longer words, go to
substring search, whose hits come latest first with score 0.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from .query import fts5_match, has_cjk, mark, trigrams, websearch
from .records import SearchHit

SNIPPET_TOKENS = 24
PG_HEADLINE = (
    'StartSel=">>>", StopSel="<<<", MaxWords=30, MinWords=12, MaxFragments=2, FragmentDelimiter=" ... "'
)
TRIGRAM = 3
"""Terms shorter than this have no trigram: they are matched by LIKE alone."""


class Filters:
    """The WHERE clauses every search shares, keyword and semantic halves alike: profile, and optionally not
    one session, only one role, only sessions from one source, only messages written in [since, until];
    and whether to keep only each session's best hit."""

    def __init__(
        self,
        profile: str,
        exclude_session: str | None,
        role: str | None,
        limit: int,
        per_session: bool,
        *,
        source: str | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> None:
        self.per_session = per_session
        self.profile, self.role, self.since, self.until = profile, role, since, until
        self.params: dict[str, Any] = {"profile": profile, "limit": limit}
        self.sql = "s.profile = :profile AND m.role <> 'system'"
        for value, clause, name in (
            (exclude_session, "m.session_id <> :exclude_session", "exclude_session"),
            (role, "m.role = :role", "role"),
            (source, "s.source = :source", "source"),
            (since, "m.created_at >= :since", "since"),
            (until, "m.created_at <= :until", "until"),
        ):
            if value is not None:
                self.sql += f" AND {clause}"
                self.params[name] = value


def search_sqlite(conn: Connection, words: list[str], where: Filters) -> list[SearchHit]:
    if has_cjk(" ".join(words)):
        return _sqlite_substring(conn, words, where)
    hits = _unicode61(conn, words, where)
    if not hits and all(len(w) >= TRIGRAM for w in words):
        hits = _sqlite_substring(conn, words, where)
    return hits


def _unicode61(conn: Connection, words: list[str], where: Filters) -> list[SearchHit]:
    """Hits ranked by bm25 from the word index."""
    # Rank and cut first, then build snippets for the few rows kept. CROSS JOIN keeps the index first: newer
    # SQLite planners (3.51) start from the profile's sessions and run the MATCH once per message instead.
    candidates = f"""
        SELECT messages_fts.rowid AS id, m.session_id, -bm25(messages_fts) AS score
        FROM messages_fts CROSS JOIN messages m ON m.id = messages_fts.rowid
        CROSS JOIN sessions s ON s.id = m.session_id
        WHERE messages_fts MATCH :match AND {where.sql}
    """
    sql = f"""
        SELECT m.id AS message_id, m.session_id, m.role, m.created_at, s.title AS session_title, top.score,
               snippet(messages_fts, 0, '>>>', '<<<', '...', {SNIPPET_TOKENS}) AS snippet
        FROM ({_best(candidates, where)}) AS top
        JOIN messages_fts ON messages_fts.rowid = top.id JOIN messages m ON m.id = top.id
        JOIN sessions s ON s.id = m.session_id
        WHERE messages_fts MATCH :match
        ORDER BY top.score DESC, m.id DESC
    """
    rows = conn.execute(text(sql), {**where.params, "match": fts5_match(words)}).mappings()
    return [SearchHit.model_validate(dict(row)) for row in rows]


def _sqlite_substring(conn: Connection, words: list[str], where: Filters) -> list[SearchHit]:
    """Messages containing every word as a substring, latest first (score 0): the trigram index yields the
    candidates holding all the words' trigrams, newest first, and LIKE keeps those holding the words."""
    grams = trigrams(words)
    if not grams:
        return _substring(conn, "LIKE", words, where)
    like_sql, params = _likes("LIKE", words)
    sql = _latest(
        f"""
        FROM messages_trigram CROSS JOIN messages m ON m.id = messages_trigram.rowid
        CROSS JOIN sessions s ON s.id = m.session_id
        WHERE messages_trigram MATCH :match AND {where.sql}{like_sql}
        """,
        where,
        newest="messages_trigram.rowid",
    )
    rows = conn.execute(text(sql), {**where.params, **params, "match": fts5_match(grams)}).mappings()
    return [_marked(row, words) for row in rows]


def search_postgres(conn: Connection, words: list[str], where: Filters) -> list[SearchHit]:
    if has_cjk(" ".join(words)):
        return _substring(conn, "ILIKE", words, where)
    # The expression and predicate match the messages_tsv index exactly. Headlines only for the rows kept.
    candidates = f"""
        SELECT m.id, m.session_id, ts_rank(to_tsvector('simple', m.content), q.q) AS score
        FROM messages m JOIN sessions s ON s.id = m.session_id,
             websearch_to_tsquery('simple', :query) AS q(q)
        WHERE to_tsvector('simple', m.content) @@ q.q AND {where.sql}
    """
    sql = f"""
        SELECT m.id AS message_id, m.session_id, m.role, m.created_at, s.title AS session_title, top.score,
               ts_headline('simple', m.content, websearch_to_tsquery('simple', :query), :headline) AS snippet
        FROM ({_best(candidates, where)}) AS top
        JOIN messages m ON m.id = top.id JOIN sessions s ON s.id = m.session_id
        ORDER BY top.score DESC, top.id DESC
    """
    params = {**where.params, "query": websearch(words), "headline": PG_HEADLINE}
    hits = [SearchHit.model_validate(dict(row)) for row in conn.execute(text(sql), params).mappings()]
    if not hits and all(len(w) >= TRIGRAM for w in words):
        hits = _substring(conn, "ILIKE", words, where)
    return hits


def _substring(conn: Connection, op: str, words: list[str], where: Filters) -> list[SearchHit]:
    """Messages containing every term anywhere, latest first (score 0). pg_trgm indexes ILIKE."""
    like_sql, params = _likes(op, words)
    sql = _latest(
        f"FROM messages m JOIN sessions s ON s.id = m.session_id WHERE {where.sql}{like_sql}", where
    )
    rows = conn.execute(text(sql), {**where.params, **params}).mappings()
    return [_marked(row, words) for row in rows]


def _best(candidates: str, where: Filters) -> str:
    """The ids and scores of the `limit` best `candidates` (rows of id, session_id, score), ties to the
    latest; with per_session, only each session's best row competes."""
    if where.per_session:
        candidates = f"""
            SELECT id, score FROM (
                SELECT c.id, c.score,
                       row_number() OVER (PARTITION BY c.session_id ORDER BY c.score DESC, c.id DESC) AS nth
                FROM ({candidates}) AS c
            ) AS ranked WHERE nth = 1
        """
    return f"SELECT b.id, b.score FROM ({candidates}) AS b ORDER BY b.score DESC, b.id DESC LIMIT :limit"


def _latest(source: str, where: Filters, newest: str = "m.id") -> str:
    """The `limit` latest messages of `source` (FROM ... WHERE ... over messages m and sessions s), with the
    columns _marked needs; with per_session, each session's latest only. `newest` orders them: an index's
    rowid lets SQLite stop early instead of sorting every candidate."""
    if where.per_session:
        top = f"SELECT max(m.id) AS id {source} GROUP BY m.session_id ORDER BY max(m.id) DESC LIMIT :limit"
    else:
        top = f"SELECT m.id {source} ORDER BY {newest} DESC LIMIT :limit"
    return f"""
        SELECT m.id, m.session_id, m.role, m.created_at, s.title AS session_title, m.content
        FROM ({top}) AS top JOIN messages m ON m.id = top.id JOIN sessions s ON s.id = m.session_id
        ORDER BY m.id DESC
    """


def _marked(row: Any, words: list[str]) -> SearchHit:
    """A substring hit: the snippet marked here, no rank."""
    return SearchHit(
        session_id=row["session_id"],
        message_id=row["id"],
        role=row["role"],
        snippet=mark(row["content"], words),
        score=0.0,
        created_at=row["created_at"],
        session_title=row["session_title"],
    )


def _likes(op: str, words: list[str]) -> tuple[str, dict[str, str]]:
    """` AND m.content LIKE :like0 ...` requiring each word as a substring, with its parameters."""
    sql = "".join(f" AND m.content {op} :like{i} ESCAPE '\\'" for i in range(len(words)))
    return sql, {f"like{i}": "%" + _escape_like(w) + "%" for i, w in enumerate(words)}


def _escape_like(word: str) -> str:
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
