"""Semantic recall: the offline embedding model, vectors per model in SQLite (sqlite-vec) and PostgreSQL
(the fallback without pgvector), the background indexer (failures, model changes, kill -9 mid-backfill),
hybrid search on a paraphrase corpus, and the CLI. Real SQLite, PostgreSQL and the scripted model server."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hermetic_cli import hermetic
from paraphrases import TOPICS, UNRELATED
from postgres import SUPERUSER, LocalPostgres
from sqlalchemy import text

from bench.recall_corpus import SYMPTOMS, SYSTEMS
from control_plane.config.memory import EmbeddingSettings
from control_plane.models.fake_llm import FakeLLM
from control_plane.recall.embeddings import Embedder, EmbeddingError, LiteLLMEmbedder, WordLlamaEmbedder
from control_plane.store import Store, StoreError
from control_plane.store.vectors import vector_storage

P = "default"
TESTS = Path(__file__).resolve().parents[1] / "support"
WORDS = sorted({w for pair in SYSTEMS + SYMPTOMS for said in pair for w in said.split()})
WAIT = 60.0


@pytest.fixture(scope="module")
def wordllama() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


@pytest.fixture(params=["sqlite", "postgresql", "pgvector"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """SQLite; PostgreSQL without pgvector (Debian's: the fallback); PostgreSQL with pgvector (HNSW)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/hermetic.db"
        return
    server = request.getfixturevalue(request.param if request.param == "pgvector" else "postgres")
    name = server.create_database()
    try:
        yield server.url(name)
    finally:
        server.drop_database(name)


def open_store(url: str, embedder: Embedder | None, **options: float) -> Store:
    cut = EmbeddingSettings().min_similarity  # the default a profile gets
    return Store(url, embedder=embedder, min_similarity=cut, **options)  # type: ignore[arg-type]


def fill(store: Store) -> dict[str, str]:
    """One past session per paraphrase topic; returns topic -> session id."""
    ids = {}
    for topic, (messages, _question) in TOPICS.items():
        session = store.create_session(P, title=topic, source="telegram" if topic == "travel" else "cli")
        store.add_messages(session.id, [{"role": r, "content": c} for r, c in messages])
        ids[topic] = session.id
    return ids


def test_wordllama_loads_from_its_wheel_with_no_network_attempt(tmp_path: Path) -> None:
    """In a fresh process with an empty home (no cache) and every way out refused, loading and embedding
    works and not one connection or name lookup is attempted."""
    script = textwrap.dedent(
        """
        import socket, sys
        tried = []
        def refuse(*args, **kwargs):
            tried.append(args[1:] or kwargs)
            raise OSError("network attempt")
        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.getaddrinfo = refuse
        socket.create_connection = refuse
        from control_plane.recall.embeddings import WordLlamaEmbedder
        vectors = WordLlamaEmbedder().embed(["the login timeout", "session expiry"])
        print(vectors.shape, tried)
        sys.exit(1 if tried else 0)
        """
    )
    env = {**os.environ, "HOME": str(tmp_path), "HF_HUB_OFFLINE": "0"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == "(2, 256) []"
    assert not (tmp_path / ".cache" / "wordllama").exists()


def test_hybrid_finds_paraphrases_keyword_misses(url: str, wordllama: WordLlamaEmbedder) -> None:
    with open_store(url, wordllama) as store:
        ids = fill(store)
        assert store.indexer is not None and store.indexer.wait_caught_up(WAIT)
        for topic, (_messages, question) in TOPICS.items():
            assert store.recall(P, question, mode="keyword") == [], topic
            hybrid = store.recall(P, question, limit=3)
            assert hybrid and hybrid[0].session_id == ids[topic], (topic, [h.session_title for h in hybrid])
            semantic = store.recall(P, question, limit=1, mode="semantic")
            assert [s.session_id for s in semantic] == [ids[topic]]
            assert semantic[0].window and semantic[0].first  # the same shape as a keyword recall
        # a question sharing words is still found by keyword, and hybrid keeps it first
        assert store.recall(P, "pgbouncer", mode="keyword")[0].session_id == ids["database"]
        assert store.recall(P, "pgbouncer")[0].session_id == ids["database"]


def test_a_question_no_session_answers_finds_nothing(url: str, wordllama: WordLlamaEmbedder) -> None:
    """Every message has a nearest neighbour; one merely less far than the rest is not an answer."""
    with open_store(url, wordllama) as store:
        fill(store)
        assert store.indexer is not None and store.indexer.wait_caught_up(WAIT)
        for question in UNRELATED:
            assert store.search(P, question, mode="semantic") == [], question
            assert store.recall(P, question) == [], question  # hybrid: no keyword hit either


def test_filters_apply_to_the_semantic_half(url: str, wordllama: WordLlamaEmbedder) -> None:
    with open_store(url, wordllama) as store:
        ids = fill(store)
        other = store.create_session("someone-else", title="their trip")
        store.add_messages(other.id, [{"role": "user", "content": TOPICS["travel"][0][0][1]}])
        assert store.indexer is not None and store.indexer.wait_caught_up(WAIT)
        question = TOPICS["travel"][1]
        found = {h.session_id for h in store.search(P, question, mode="semantic", limit=50)}
        assert ids["travel"] in found and other.id not in found  # profile
        assert ids["travel"] not in {
            h.session_id for h in store.search(P, question, mode="semantic", exclude_session=ids["travel"])
        }
        assert {h.session_id for h in store.search(P, question, mode="semantic", source="telegram")} == {
            ids["travel"]
        }
        roles = {h.role for h in store.search(P, question, mode="semantic", role="assistant", limit=50)}
        assert roles == {"assistant"}
        assert store.search(P, question, mode="semantic", since=time.time() + 60) == []
        assert store.search(P, question, mode="hybrid", until=0.0) == []


def test_deleting_a_session_deletes_its_vectors(url: str, wordllama: WordLlamaEmbedder) -> None:
    with open_store(url, wordllama) as store:
        ids = fill(store)
        assert store.indexer is not None and store.indexer.wait_caught_up(WAIT)
        table = store.engine.connect().scalar(text("SELECT table_name FROM vector_indexes"))
        before = _count(store, str(table))
        question = TOPICS["garden"][1]
        assert store.recall(P, question, mode="semantic", limit=1)[0].session_id == ids["garden"]
        assert store.delete_session(ids["garden"], P)
        assert _count(store, str(table)) == before - 2
        assert ids["garden"] not in {r.session_id for r in store.recall(P, question, mode="semantic")}


@pytest.mark.parametrize("server", ["postgres", "pgvector"])
def test_postgresql_searches_by_hnsw_where_the_server_has_pgvector(
    server: str, request: pytest.FixtureRequest, wordllama: WordLlamaEmbedder
) -> None:
    """With pgvector the vectors are a vector column under an HNSW index that the search's plan uses;
    without it (Debian's server) a bytea column searched in the control plane, and doctor says which."""
    postgres: LocalPostgres = request.getfixturevalue(server)
    name = postgres.create_database()
    try:
        with open_store(postgres.url(name), wordllama) as store:
            fill(store)
            assert store.indexer is not None and store.indexer.wait_caught_up(WAIT)
            with store.engine.connect() as conn:
                table = str(conn.scalar(text("SELECT table_name FROM vector_indexes")))
                kind = conn.scalar(
                    text(
                        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
                        "WHERE attrelid = to_regclass(:t) AND attname = 'embedding'"
                    ),
                    {"t": table},
                )
                indexes = list(
                    conn.scalars(text("SELECT indexdef FROM pg_indexes WHERE tablename = :t"), {"t": table})
                )
                plan = (
                    "\n".join(
                        conn.scalars(
                            text(
                                "EXPLAIN SELECT message_id FROM "
                                f"{table} ORDER BY embedding <=> CAST(:v AS vector) LIMIT 5"
                            ),
                            {"v": "[" + ",".join(["0.1"] * 256) + "]"},
                        )
                    )
                    if server == "pgvector"
                    else ""
                )
            where = vector_storage(store.engine)
        if server == "pgvector":
            assert kind == "vector(256)"
            assert any("USING hnsw (embedding vector_cosine_ops)" in i for i in indexes), indexes
            assert f"Index Scan using {table}_hnsw" in plan, plan
            assert where.startswith("PostgreSQL with pgvector 0.8")
        else:
            assert kind == "bytea" and not any("hnsw" in i for i in indexes)
            assert where.startswith("PostgreSQL without pgvector")
    finally:
        postgres.drop_database(name)


def test_pgvector_finds_a_profiles_message_under_a_crowd_of_nearer_ones(
    request: pytest.FixtureRequest, wordllama: WordLlamaEmbedder
) -> None:
    """HNSW yields its ef_search nearest first; when another profile owns all of those, the iterative
    scan goes on until this profile's own nearest message turns up. (The planner would scan so small a
    table instead of using the index: the database forbids it, so the index path is the one tested.)"""
    server: LocalPostgres = request.getfixturevalue("pgvector")
    name = server.create_database()
    with psycopg.connect(host="127.0.0.1", port=server.port, user=SUPERUSER, dbname=name) as admin:
        admin.execute(f'ALTER DATABASE "{name}" SET enable_seqscan = off'.encode())
    try:
        with open_store(server.url(name), wordllama) as store:
            ids = fill(store)
            question = TOPICS["travel"][1]
            crowd = store.create_session("crowd")
            # 300 different texts nearer the question than the answer (copies of one text would leave
            # the answer unreachable in the graph, which no scan setting cures: HNSW is approximate)
            crowded = [f"{question} {a} {b}" for a in WORDS[:20] for b in WORDS[20:35]]
            store.add_messages(crowd.id, [{"role": "user", "content": c} for c in crowded])
            assert store.indexer is not None and store.indexer.wait_caught_up(WAIT)
            assert len(store.search("crowd", question, mode="semantic", limit=100)) == 100
            hits = store.search(P, question, mode="semantic", limit=1)
            assert [h.session_id for h in hits] == [ids["travel"]]
    finally:
        server.drop_database(name)


def _count(store: Store, table: str) -> int:
    with store.engine.connect() as conn:
        return int(conn.scalar(text(f"SELECT count(*) FROM {table}")) or 0)


def test_semantic_mode_without_a_model_is_a_clear_error(url: str) -> None:
    with open_store(url, None) as store:
        fill(store)
        with pytest.raises(StoreError, match="semantic search is off"):
            store.search(P, "anything", mode="semantic")
        assert store.recall(P, "pgbouncer")  # hybrid is keyword alone


def test_a_failing_model_never_loses_or_blocks_a_message(url: str) -> None:
    """The embeddings server is down: messages are stored, keyword recall works, hybrid degrades to it; when
    the server is back the backlog is embedded by the litellm model, vectors recording that model."""
    with FakeLLM() as server:
        server.embeddings_down = True
        model = EmbeddingSettings(model="openai/text-embedding-3-small", api_base=server.url, api_key="test")
        with open_store(url, LiteLLMEmbedder(model)) as store:
            ids = fill(store)
            assert store.indexer is not None
            with pytest.raises(EmbeddingError, match="503"):
                store.indexer.step()  # what the background thread meets too: nothing is written
            assert store.indexer.progress().done == 0
            assert len(store.history(ids["auth"])) == 2
            assert store.recall(P, "pgbouncer")[0].session_id == ids["database"]
            assert store.search(P, "pgbouncer", mode="semantic") == []  # nothing embedded yet
            server.embeddings_down = False
            assert store.indexer.wait_caught_up(WAIT)
            hits = store.search(P, "pgbouncer max_connections", mode="semantic", limit=1)
            assert hits[0].session_id == ids["database"]
            with store.engine.connect() as conn:
                models = [row[0] for row in conn.execute(text("SELECT model, dim FROM vector_indexes"))]
            assert models == ["openai/text-embedding-3-small"]
        assert all(body["model"] == "text-embedding-3-small" for body in server.embedding_requests)


def test_changing_the_model_re_embeds_and_never_mixes_vectors(url: str, wordllama: WordLlamaEmbedder) -> None:
    with open_store(url, wordllama) as store:
        ids = fill(store)
        assert store.indexer is not None and store.indexer.wait_caught_up(WAIT)
    with FakeLLM() as server:
        model = EmbeddingSettings(model="openai/text-embedding-3-small", api_base=server.url, api_key="test")
        with open_store(url, LiteLLMEmbedder(model), embed_batch=4) as store:
            assert store.indexer is not None and store.indexer.wait_caught_up(WAIT)
            assert store.indexer.progress().done == store.indexer.progress().total == 2 * len(TOPICS)
            # the wordllama index (256 dimensions) is gone, the new one (64) holds every message
            with store.engine.connect() as conn:
                assert list(conn.execute(text("SELECT model, dim FROM vector_indexes"))) == [
                    ("openai/text-embedding-3-small", 64)
                ]
            found = store.search(P, "SPF DKIM records", mode="semantic", limit=1)
            assert found[0].session_id == ids["email"]


def test_kill_9_during_backfill_resumes_where_it_stopped(tmp_path: Path) -> None:
    """An existing database without vectors is backfilled by `sessions reindex`; killed -9 mid-way (its
    output pipe, too small to hold every progress line, stops it after a few batches), a second run
    embeds only what is left and every message ends with exactly one vector."""
    db = tmp_path / "profiles" / P / "hermetic.db"
    with Store(f"sqlite:///{db}") as store:
        for n in range(60):
            session = store.create_session(P, title=f"s{n}")
            store.add_messages(
                session.id,
                [{"role": "user", "content": f"message {n} {i} about topic {i % 7}"} for i in range(50)],
            )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env |= {"HERMETIC_ROOT": str(tmp_path), "HERMETIC_DATABASE_URL": f"sqlite:///{db}"}
    env |= {"HERMETIC_MEMORY__EMBEDDINGS__BATCH": "8", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    read, write = os.pipe()
    fcntl.fcntl(write, 1031, 4096)  # F_SETPIPE_SZ: one page, about 80 progress lines
    child = subprocess.Popen(
        [sys.executable, "-m", "control_plane", "sessions", "reindex"],
        stdout=write,
        env=env,
        stderr=subprocess.DEVNULL,
    )
    os.close(write)
    with os.fdopen(read) as lines:
        first = lines.readline()
        assert first.startswith("embedded 8/3000"), first
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    with Store(f"sqlite:///{db}") as store, store.engine.connect() as conn:
        table, through = conn.execute(text("SELECT table_name, embedded_through FROM vector_indexes")).one()
        kept = int(conn.scalar(text(f"SELECT count(*) FROM {table}")) or 0)
    assert 8 <= kept < 3000 and kept == through  # message ids run 1..3000, all indexable
    done = hermetic("sessions", "reindex", env=env)
    assert done.returncode == 0, done.stderr
    lines_after = done.stdout.splitlines()
    assert lines_after[0].startswith(f"embedded {kept + 8}/3000") and lines_after[-1].startswith(
        "embedded 3000/3000"
    )
    with Store(f"sqlite:///{db}") as store, store.engine.connect() as conn:
        ids = [row[0] for row in conn.execute(text(f"SELECT rowid FROM {table} ORDER BY rowid"))]
    assert ids == list(range(1, 3001))


WRITER = """
import sys, threading
from control_plane.recall.embeddings import WordLlamaEmbedder
from control_plane.store import Store
from paraphrases import TOPICS

class Stuck(WordLlamaEmbedder):
    def embed(self, texts):
        print("embedding", len(texts), flush=True)
        threading.Event().wait()  # killed here, mid-batch

store = Store(sys.argv[1], embedder=Stuck())
for topic, (messages, _question) in TOPICS.items():
    session = store.create_session("default", title=topic)
    store.add_messages(session.id, [{"role": r, "content": c} for r, c in messages])
print("written", flush=True)
threading.Event().wait()
"""


def test_kill_9_while_embedding_new_messages_loses_none(url: str, wordllama: WordLlamaEmbedder) -> None:
    """The contract of indexing behind a cursor: add_messages returns once the messages are committed; a
    process killed -9 while its indexer is embedding them leaves them stored and unembedded, and the next
    process to open the store embeds every one, exactly once."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(TESTS)])}
    child = subprocess.Popen([sys.executable, "-c", WRITER, url], stdout=subprocess.PIPE, text=True, env=env)
    assert child.stdout is not None
    seen = {child.stdout.readline().split()[0], child.stdout.readline().split()[0]}
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert seen == {"written", "embedding"}
    with Store(url) as plain, plain.engine.connect() as conn:  # no model: no indexer to race
        assert not conn.scalar(text("SELECT coalesce(max(embedded_through), 0) FROM vector_indexes"))
        assert conn.scalar(text("SELECT count(*) FROM messages")) == 2 * len(TOPICS)
    with open_store(url, wordllama) as store:
        assert store.indexer is not None and store.indexer.wait_caught_up(WAIT)
        with store.engine.connect() as conn:
            table = str(conn.scalar(text("SELECT table_name FROM vector_indexes")))
            key = "rowid" if url.startswith("sqlite") else "message_id"
            vectors = sorted(conn.scalars(text(f"SELECT {key} FROM {table}")))
            messages = sorted(conn.scalars(text("SELECT id FROM messages")))
        assert vectors == messages and len(messages) == 2 * len(TOPICS)
        hit = store.recall(P, TOPICS["travel"][1], mode="semantic", limit=1)
        assert hit[0].session_title == "travel"


def test_cli_search_modes(tmp_path: Path) -> None:
    db = tmp_path / "profiles" / P / "hermetic.db"
    with Store(f"sqlite:///{db}") as store:
        ids = fill(store)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env |= {"HERMETIC_ROOT": str(tmp_path), "HERMETIC_DATABASE_URL": f"sqlite:///{db}", "COLUMNS": "200"}
    assert hermetic("sessions", "reindex", env=env).returncode == 0
    question = TOPICS["auth"][1]
    keyword = hermetic("sessions", "search", question, "--mode", "keyword", env=env)
    assert keyword.returncode == 1 and "no matches" in keyword.stderr
    hybrid = hermetic("sessions", "search", question, "--limit", "1", env=env)
    assert hybrid.returncode == 0 and ids["auth"] in hybrid.stdout, hybrid.stdout + hybrid.stderr
    off = hermetic(
        "sessions",
        "search",
        question,
        "--mode",
        "semantic",
        env=env | {"HERMETIC_MEMORY__EMBEDDINGS__MODEL": "off"},
    )
    assert off.returncode == 2 and "semantic search is off" in off.stderr
