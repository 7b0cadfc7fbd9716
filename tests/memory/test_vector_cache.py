"""The in-memory copy of the vectors that SQLite and PostgreSQL without pgvector search: exact against a
float32 scan, current with what other stores write, deletions and model changes; real SQLite, PostgreSQL,
WordLlama and the scripted model server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from paraphrases import TOPICS

from control_plane.config.memory import EmbeddingSettings
from control_plane.recall.embeddings import Embedder, Vectors, WordLlamaEmbedder, normalized
from control_plane.store import Store
from control_plane.store.vector_scan import Matrix

P = "default"
WAIT = 60.0
TESTS = Path(__file__).resolve().parents[1] / "support"
WRITER = """
import sys
from paraphrases import TOPICS
from control_plane.recall.embeddings import WordLlamaEmbedder
from control_plane.store import Store
with Store(sys.argv[1], embedder=WordLlamaEmbedder()) as store:
    session = store.create_session("default", title="garden")
    store.add_messages(session.id, [{"role": r, "content": c} for r, c in TOPICS["garden"][0]])
    assert store.indexer is not None and store.indexer.wait_caught_up(60)
    print(session.id)
"""


@pytest.fixture(scope="module")
def wordllama() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """SQLite, and PostgreSQL without pgvector (Debian's: the fallback): both search the copy."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/hermetic.db"
        return
    server = request.getfixturevalue("postgres")
    name = server.create_database()
    try:
        yield server.url(name)
    finally:
        server.drop_database(name)


class FirstDimensions:
    """Another model: WordLlama's first 64 dimensions (it is trained so that a prefix still embeds)."""

    model = "wordllama-first-64"

    def __init__(self, wordllama: WordLlamaEmbedder) -> None:
        self._wordllama = wordllama

    def embed(self, texts: Sequence[str]) -> Vectors:
        return normalized(self._wordllama.embed(texts)[:, :64])


def open_store(url: str, embedder: Embedder) -> Store:
    return Store(url, embedder=embedder, min_similarity=EmbeddingSettings().min_similarity)


def caught_up(store: Store) -> Store:
    assert store.indexer is not None and store.indexer.wait_caught_up(WAIT)
    return store


def add_topic(store: Store, topic: str) -> str:
    session = store.create_session(P, title=topic)
    store.add_messages(session.id, [{"role": r, "content": c} for r, c in TOPICS[topic][0]])
    return session.id


def found(store: Store, topic: str, **options: object) -> list[str]:
    hits = store.search(P, TOPICS[topic][1], mode="semantic", per_session=True, **options)  # type: ignore[arg-type]
    return [h.session_id for h in hits]


def test_the_scan_returns_exactly_the_float32_nearest() -> None:
    """int8 first, float32 after, must give the float32 top k itself: on clustered vectors with exact
    duplicates (ties) and a filter, against a plain float32 scan."""
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((20, 64)).astype(np.float32)
    rows = centres[rng.integers(0, 20, 6000)] + 0.3 * rng.standard_normal((6000, 64)).astype(np.float32)
    rows[4000:4500] = rows[4000]  # 500 copies of one vector
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    matrix = Matrix(64)
    for start in range(0, len(rows), 700):  # in batches, as the copy grows
        matrix.append(rows[start : start + 700])
    allowed = rng.random(len(rows)) < 0.7
    for query in [rows[4000], *rng.standard_normal((30, 64)).astype(np.float32)]:
        query = query / np.linalg.norm(query)
        positions, scores = matrix.nearest(query, allowed, 50)
        exact = np.where(allowed, rows @ query, -np.inf)
        assert allowed[positions].all() and len(positions) == 50
        np.testing.assert_allclose(scores, np.sort(exact)[::-1][:50], atol=1e-5)
        np.testing.assert_allclose(scores, rows[positions] @ query, atol=1e-5)
    assert len(matrix.nearest(rows[0], np.zeros(len(rows), bool), 10)[0]) == 0


def test_the_copy_sees_what_another_process_writes(url: str, wordllama: WordLlamaEmbedder) -> None:
    with caught_up(open_store(url, wordllama)) as reader:
        auth = add_topic(reader, "auth")
        caught_up(reader)
        assert found(reader, "auth")[:1] == [auth]  # the copy is loaded now
        assert found(reader, "garden") == []  # nothing about it yet (below the similarity floor)
        garden = subprocess.run(  # another process: its own connections, its own indexer
            [sys.executable, "-c", WRITER, url],
            capture_output=True,
            text=True,
            check=True,
            cwd=TESTS,
            timeout=WAIT,
        ).stdout.strip()
        assert found(reader, "garden")[:1] == [garden]
        assert found(reader, "auth")[:1] == [auth]


def test_deleted_sessions_leave_the_copy_and_the_next_best_fill_in(
    url: str, wordllama: WordLlamaEmbedder
) -> None:
    with open_store(url, wordllama) as reader:
        ids = {topic: add_topic(reader, topic) for topic in TOPICS}
        crowd = [add_topic(reader, "garden") for _ in range(3)]
        caught_up(reader)
        before = found(reader, "garden", limit=len(TOPICS) + 3)
        assert set(crowd) | {ids["garden"]} <= set(before)
        with open_store(url, wordllama) as other:  # deleted by another store: the copy learns on sight
            for session in crowd:
                assert other.delete_session(session, P)
        after = found(reader, "garden", limit=len(TOPICS) + 3)
        assert not set(crowd) & set(after)
        assert after == [s for s in before if s not in crowd]  # the rest, in the same order
        assert reader.delete_session(ids["garden"], P)
        assert ids["garden"] not in found(reader, "garden")


def test_a_model_change_away_and_back_is_followed(url: str, wordllama: WordLlamaEmbedder) -> None:
    """The reader only searches (no indexer of its own): other stores switch the model and back."""
    with caught_up(open_store(url, wordllama)) as writer:
        auth = add_topic(writer, "auth")
        caught_up(writer)
    with Store(url, embedder=wordllama, min_similarity=0.18, background=False) as reader:
        assert found(reader, "auth")[:1] == [auth]
        with caught_up(Store(url, embedder=FirstDimensions(wordllama))) as other:
            garden = add_topic(other, "garden")
            caught_up(other)
        # WordLlama's vectors were retired when the other model caught up: none to search, none stale
        assert found(reader, "auth") == []
        assert reader.search(P, TOPICS["auth"][1], per_session=True) == []  # hybrid: keyword finds none
        with caught_up(open_store(url, wordllama)):  # back to WordLlama: a new table, embedded afresh
            pass
        assert found(reader, "garden")[:1] == [garden]
        assert found(reader, "auth")[:1] == [auth]


def test_filters_are_answered_by_the_copy(url: str, wordllama: WordLlamaEmbedder) -> None:
    with open_store(url, wordllama) as store:
        mine = add_topic(store, "travel")
        theirs = store.create_session("someone-else")
        store.add_messages(theirs.id, [{"role": "user", "content": TOPICS["travel"][0][0][1]}])
        caught_up(store)
        assert found(store, "travel") == [mine]  # profile
        assert found(store, "travel", exclude_session=mine) == []
        assert {h.role for h in store.search(P, TOPICS["travel"][1], mode="semantic", role="user")} == {
            "user"
        }
        assert found(store, "travel", source="telegram") == []
        store.update_session(mine, source="telegram")  # a session's source may change: read at search
        assert found(store, "travel", source="telegram") == [mine]
