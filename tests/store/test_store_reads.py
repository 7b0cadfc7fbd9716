"""How the store reads (store/engine.py read_engine): on PostgreSQL each read statement runs in autocommit, so
no read ends in a ROLLBACK, which in psycopg deallocates every statement it prepared on the connection; a
recall's statements stay prepared from their fifth run on. Real PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import event, text

from control_plane.store import Store

P = "default"
POSTGRES_ONLY = pytest.mark.parametrize("store", ["postgresql"], indirect=True)  # conftest's store


def _history(store: Store) -> None:
    for topic in ("kubernetes deploy", "kubernetes upgrade", "postgres backup"):
        session = store.create_session(P, title=topic)
        store.add_messages(
            session.id,
            [
                {"role": "user", "content": f"how did the {topic} go?"},
                {"role": "assistant", "content": f"the {topic} went fine after a retry"},
            ],
        )


@POSTGRES_ONLY
def test_a_recalls_statements_stay_prepared_and_give_the_same_answer(store: Store) -> None:
    _history(store)
    first = store.recall(P, "kubernetes retry")
    fallback = store.recall(P, "ubernete")  # substring: no word matches
    assert [f.session_title for f in first] == ["kubernetes upgrade", "kubernetes deploy"]
    for _ in range(6):
        assert store.recall(P, "kubernetes retry") == first
        assert store.recall(P, "ubernete") == fallback
    assert store.engine.pool.checkedin() == 1  # every call above was served by this one connection
    with store.engine.connect() as conn:
        prepared = conn.scalars(text("SELECT statement FROM pg_prepared_statements")).all()
    assert any("websearch_to_tsquery" in s for s in prepared), prepared  # the word query
    assert any("ILIKE" in s for s in prepared), prepared  # the substring fallback
    assert any("'window' AS part" in s for s in prepared), prepared  # the surroundings


@POSTGRES_ONLY
def test_a_recall_takes_one_connection_from_the_pool(store: Store) -> None:
    """The search and the messages around its hits share a checkout (and its pre-ping round trip)."""
    _history(store)
    checkouts: list[object] = []
    event.listen(store.engine, "checkout", lambda *_: checkouts.append(None))
    assert len(store.recall(P, "kubernetes retry")) == 2
    assert len(checkouts) == 1


def test_a_search_without_a_semantic_half_gives_the_first_hits_of_a_longer_one(store: Store) -> None:
    """Hybrid without an embedder asks the keyword half for `limit` hits only, not fusion's depth: the same
    hits in the same order (with the same scores) as the head of a longer search, on both dialects, by
    words and by the substring fallback."""
    for i in range(8):
        session = store.create_session(P, title=f"s{i}")
        store.add_messages(
            session.id,
            [
                {"role": "user", "content": f"the kubernetes deploy number {i} " + "retry " * (i % 3)},
                {"role": "assistant", "content": f"kubernetes deploy {i} done, no retry"},
            ],
        )
    for query in ("kubernetes retry", "ubernete", "deploy"):
        longer = store.search(P, query, limit=10)
        assert len(longer) == 10, query
        for limit in (1, 3):
            assert store.search(P, query, limit=limit) == longer[:limit], (query, limit)
        sessions = store.recall(P, query, limit=8)
        assert len(sessions) == 8, query
        assert store.recall(P, query, limit=3) == sessions[:3], query
