"""The semantic half of a search (nearest vectors, as SearchHits) and its fusion with the keyword half.

Hybrid ranks by reciprocal rank fusion: each half's rank r adds 1 / (RRF_K + r), so a hit high in either
list rises and one in both rises most, without comparing BM25 scores to cosine similarities.
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import Connection, text

from .records import SearchHit
from .search import Filters

SearchMode = Literal["keyword", "semantic", "hybrid"]
RRF_K = 60
"""The usual constant (Cormack et al. 2009): it damps the weight of the very first ranks."""
DEPTH = 20
"""Hits each half contributes to a hybrid search at least (more when the limit is higher)."""


def best_per_session(
    candidates: list[tuple[int, float]], sessions: dict[int, str]
) -> list[tuple[int, float]]:
    seen: set[str] = set()
    kept = []
    for message_id, score in candidates:
        if sessions[message_id] not in seen:
            seen.add(sessions[message_id])
            kept.append((message_id, score))
    return kept


def semantic_hits(conn: Connection, candidates: list[tuple[int, float]], where: Filters) -> list[SearchHit]:
    """SearchHits for (message id, similarity) pairs, nearest first, at most `limit`: one per session with
    per_session. The snippet is the message's start: a hit by meaning may share no word with the query."""
    if not candidates:
        return []
    params: dict[str, Any] = {f"c{i}": c for i, (c, _) in enumerate(candidates)}
    sql = (
        "SELECT m.id, m.session_id, m.role, m.created_at, s.title AS session_title, m.content "
        "FROM messages m JOIN sessions s ON s.id = m.session_id "
        f"WHERE m.id IN ({', '.join(f':c{i}' for i in range(len(candidates)))})"
    )
    rows = {int(row["id"]): row for row in conn.execute(text(sql), params).mappings()}
    candidates = [c for c in candidates if c[0] in rows]
    if where.per_session:
        candidates = best_per_session(candidates, {i: rows[i]["session_id"] for i, _ in candidates})
    return [semantic_hit(rows[i], score) for i, score in candidates[: int(where.params["limit"])]]


def semantic_hit(row: Any, score: float) -> SearchHit:
    """A hit by meaning from its message row (id, session_id, role, created_at, session_title, content).
    The snippet is the message's start: such a hit may share no word with the query."""
    return SearchHit(
        session_id=row["session_id"],
        message_id=int(row["id"]),
        role=row["role"],
        snippet=opening(row["content"] or ""),
        score=score,
        created_at=row["created_at"],
        session_title=row["session_title"],
    )


def fuse(
    keyword: list[SearchHit], semantic: list[SearchHit], limit: int, per_session: bool
) -> list[SearchHit]:
    """Both halves in one list by reciprocal rank, best first; the keyword hit (with its marked snippet)
    stands for a message or session both halves found. With per_session, sessions are what is fused."""
    scores: dict[object, float] = {}
    chosen: dict[object, SearchHit] = {}
    for hits in (keyword, semantic):
        for rank, hit in enumerate(hits, start=1):
            key: object = hit.session_id if per_session else hit.message_id
            scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank)
            chosen.setdefault(key, hit)
    order = sorted(scores, key=lambda key: (-scores[key], -chosen[key].message_id))
    return [chosen[key].model_copy(update={"score": scores[key]}) for key in order[:limit]]


def opening(content: str, width: int = 160) -> str:
    """A semantic hit's snippet: the message's first `width` characters, whitespace folded."""
    flat = " ".join(content.split())
    return flat if len(flat) <= width else flat[:width] + "..."
