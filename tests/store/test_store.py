"""The sessions database against real SQLite and a real PostgreSQL (tests/support/postgres.py)."""

from __future__ import annotations

import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from hostile_text import HOSTILE
from postgres import LocalPostgres

from control_plane.store import MessageRecord, SearchHit, SessionRecord, Store, StoreError

P = "default"


def conversation() -> list[dict[str, Any]]:
    """A turn with a tool call and its result, in OpenAI chat format."""
    return [
        {"role": "system", "content": "You are Hermetic."},
        {"role": "user", "content": "List the files, s'il vous plaît 🙂"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": '{"command": "ls -la \\"/tmp\\""}'},
                },
                {"id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "terminal", "content": "total 0\n\tREADME.md\n"},
        {"role": "tool", "tool_call_id": "call_2", "name": "read_file", "content": ""},
        {"role": "assistant", "content": "There is one file: README.md."},
    ]


def test_session_crud(store: Store) -> None:
    first = store.create_session(P, title="first", model="m1", backend="docker", source="api")
    second = store.create_session(P, parent_id=first.id)
    assert first.id != second.id and first.id.startswith("s-")
    got = store.get_session(first.id, P)
    assert got is not None
    assert (got.title, got.model, got.backend, got.source) == ("first", "m1", "docker", "api")
    assert got.message_count == 0
    assert store.get_session("s-nope", P) is None
    assert [s.id for s in store.list_sessions(P)] == [second.id, first.id]
    store.add_message(first.id, {"role": "user", "content": "hi"})  # activity moves it to the top
    assert [s.id for s in store.list_sessions(P)] == [first.id, second.id]
    assert [s.id for s in store.list_sessions(P, limit=1, offset=1)] == [second.id]
    assert store.list_sessions(P, limit=10**30, offset=10**30) == []  # past any SQL integer: nothing
    store.update_session(second.id, workspace="/home/me/project")
    assert [s.id for s in store.list_sessions(P, mounted=True)] == [second.id]
    assert [s.workspace for s in store.list_sessions(P, workspace="/home/me/project")] == ["/home/me/project"]
    assert store.list_sessions(P, workspace="/home/me/other") == []

    store.update_session(first.id, title="renamed", ended_at=123.5, sandbox_id="sb-1")
    got = store.get_session(first.id, P)
    assert got is not None and (got.title, got.ended_at, got.sandbox_id) == ("renamed", 123.5, "sb-1")
    with pytest.raises(StoreError, match="message_count"):
        store.update_session(first.id, message_count=99)
    with pytest.raises(StoreError, match="no session"):
        store.update_session("s-nope", title="x")
    with pytest.raises(StoreError, match="parent"):
        store.create_session(P, parent_id="s-nope")

    assert store.delete_session(first.id, P) is True
    assert store.delete_session(first.id, P) is False
    child = store.get_session(second.id, P)
    assert child is not None and child.parent_id is None  # the parent's deletion does not take children


def test_profiles_are_isolated(store: Store) -> None:
    mine = store.create_session("alice", title="secret plans")
    store.add_message(mine.id, {"role": "user", "content": "the launch code is swordfish"})
    assert store.get_session(mine.id, "bob") is None
    assert store.list_sessions("bob") == []
    assert store.search("bob", "swordfish") == []
    assert store.search("bob", "wordfis") == []  # nor through the substring fallback
    assert store.delete_session(mine.id, "bob") is False
    assert store.get_session(mine.id, "alice") is not None
    assert [h.session_id for h in store.search("alice", "swordfish")] == [mine.id]


def test_history_round_trips_exactly(store: Store) -> None:
    session = store.create_session(P)
    sent = conversation()
    ids = store.add_messages(session.id, sent[:3])
    ids += [store.add_message(session.id, m) for m in sent[3:]]
    assert ids == sorted(ids) and len(set(ids)) == len(sent)
    assert store.history(session.id) == sent

    records = store.messages(session.id)
    assert [r.id for r in records] == ids
    assert isinstance(records[2], MessageRecord) and records[2].tool_calls == sent[2]["tool_calls"]
    assert [r.id for r in store.messages(session.id, after_id=ids[1], limit=2)] == ids[2:4]
    assert store.messages(session.id, after_id=ids[-1]) == []


def test_totals_follow_each_message(store: Store) -> None:
    session = store.create_session(P)
    store.add_message(session.id, {"role": "user", "content": "hello"})
    store.add_message(
        session.id,
        {"role": "assistant", "content": "hi!"},
        model="openai/gpt-4.1",
        prompt_tokens=120,
        completion_tokens=8,
        cost=0.0015,
    )
    store.add_message(session.id, {"role": "assistant", "content": "more"}, prompt_tokens=130, cost=0.0005)
    got = store.get_session(session.id, P)
    assert got is not None
    assert (got.message_count, got.prompt_tokens, got.completion_tokens) == (3, 250, 8)
    assert got.cost == pytest.approx(0.002)
    assert got.updated_at >= session.updated_at
    reply = store.messages(session.id)[1]
    assert (reply.model, reply.prompt_tokens, reply.completion_tokens, reply.cost) == (
        "openai/gpt-4.1",
        120,
        8,
        0.0015,
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"role": "wizard", "content": "x"},
        {"content": "no role"},
        {"role": "user", "content": ["parts"]},
        {"role": "user", "content": "x", "surprise": 1},
        {"role": "assistant", "tool_calls": [{"type": "function"}]},
        "just a string",
    ],
)
def test_bad_messages_are_refused_and_lose_nothing(store: Store, bad: Any) -> None:
    session = store.create_session(P)
    store.add_message(session.id, {"role": "user", "content": "kept"})
    with pytest.raises(StoreError, match="message 1"):
        store.add_messages(session.id, [{"role": "user", "content": "fine"}, bad])
    assert store.history(session.id) == [{"role": "user", "content": "kept"}]
    got = store.get_session(session.id, P)
    assert got is not None and got.message_count == 1


def test_writes_to_a_missing_session_fail_clearly(store: Store) -> None:
    with pytest.raises(StoreError, match="no session 's-gone'"):
        store.add_message("s-gone", {"role": "user", "content": "hello"})
    with pytest.raises(StoreError, match="s-gone"):
        store.record_tool_call(
            "s-gone",
            call_id="c",
            tool="terminal",
            arguments={},
            backend=None,
            sandbox_id=None,
            started_at=0.0,
            duration_ms=1.0,
            exit_code=0,
            ok=True,
        )


def test_tool_call_audit_rows(store: Store) -> None:
    session = store.create_session(P)
    args = {"command": "pytest -q", "timeout": 60, "env": {"A": "1"}}
    first = store.record_tool_call(
        session.id,
        call_id="call_1",
        tool="terminal",
        arguments=args,
        backend="docker",
        sandbox_id="c0ffee",
        started_at=1700000000.25,
        duration_ms=812.5,
        exit_code=1,
        ok=False,
        error="tests failed",
    )
    second = store.record_tool_call(
        session.id,
        call_id="call_2",
        tool="read_file",
        arguments='{"path": "a"}',
        backend="local",
        sandbox_id=None,
        started_at=1700000001.0,
        duration_ms=3.0,
        exit_code=None,
        ok=True,
    )
    rows = store.tool_calls(session.id)
    assert [r.id for r in rows] == [first, second]
    assert (rows[0].tool, rows[0].arguments, rows[0].backend, rows[0].sandbox_id) == (
        "terminal",
        args,
        "docker",
        "c0ffee",
    )
    assert (rows[0].started_at, rows[0].duration_ms, rows[0].exit_code, rows[0].ok, rows[0].error) == (
        1700000000.25,
        812.5,
        1,
        False,
        "tests failed",
    )
    assert (rows[1].arguments, rows[1].exit_code, rows[1].ok) == ('{"path": "a"}', None, True)
    assert rows[1].error is None


def test_delete_cascades_to_messages_tool_calls_and_index(store: Store) -> None:
    doomed = store.create_session(P)
    kept = store.create_session(P)
    store.add_messages(doomed.id, conversation())
    store.add_messages(kept.id, [{"role": "user", "content": "README.md is elsewhere"}])
    store.record_tool_call(
        doomed.id,
        call_id="call_1",
        tool="terminal",
        arguments={},
        backend="local",
        sandbox_id=None,
        started_at=0.0,
        duration_ms=1.0,
        exit_code=0,
        ok=True,
    )
    assert {h.session_id for h in store.search(P, "README")} == {doomed.id, kept.id}
    assert store.delete_session(doomed.id, P)
    assert store.messages(doomed.id) == [] and store.tool_calls(doomed.id) == []
    assert {h.session_id for h in store.search(P, "README")} == {kept.id}
    assert {h.session_id for h in store.search(P, "EADM")} == {kept.id}  # and so does the trigram index


def test_search_ranks_marks_and_filters(store: Store) -> None:
    a = store.create_session(P, title="deploy notes")
    b = store.create_session(P, title="other")
    store.add_messages(
        a.id,
        [
            {"role": "system", "content": "kubernetes kubernetes deploy"},  # system prompts are not indexed
            {"role": "user", "content": "How to deploy to kubernetes? The kubernetes deploy keeps failing."},
            {"role": "assistant", "content": "Check the deploy logs first."},
            {"role": "tool", "tool_call_id": "c", "content": "kubernetes context unset; deploy aborted"},
        ],
    )
    store.add_messages(b.id, [{"role": "user", "content": "Unrelated: a long essay about gardening " * 20}])
    store.add_message(b.id, {"role": "assistant", "content": "kubernetes is a container orchestrator " * 10})

    hits = store.search(P, "kubernetes deploy")
    assert all(isinstance(h, SearchHit) for h in hits)
    assert [h.role for h in hits] == ["user", "tool"]  # both words required; the denser message first
    assert hits[0].score > hits[1].score
    assert hits[0].session_title == "deploy notes" and hits[0].session_id == a.id
    assert ">>>kubernetes<<<" in hits[0].snippet.lower() and ">>>deploy<<<" in hits[0].snippet.lower()

    assert {h.role for h in store.search(P, "kubernetes", role="tool")} == {"tool"}
    assert {h.session_id for h in store.search(P, "kubernetes", exclude_session=a.id)} == {b.id}
    assert len(store.search(P, "kubernetes", limit=1)) == 1
    assert store.search(P, "kubernetes", limit=0) == []
    assert store.search(P, '"deploy logs"')[0].role == "assistant"  # a quoted phrase stays a phrase
    assert store.search(P, '"logs deploy"') == []
    with pytest.raises(StoreError, match="system"):
        store.search(P, "kubernetes", role="system")


def test_search_folds_case_and_diacritics(store: Store) -> None:
    session = store.create_session(P)
    store.add_message(session.id, {"role": "user", "content": "Le Café de Flore"})
    assert [h.role for h in store.search(P, "CAFÉ")] == ["user"]
    if store.dialect == "sqlite":  # unicode61 remove_diacritics; PostgreSQL's 'simple' config keeps accents
        assert [h.role for h in store.search(P, "cafe")] == ["user"]


def test_search_cjk_through_trigrams(store: Store) -> None:
    session = store.create_session(P, title="天気")
    store.add_messages(
        session.id,
        [
            {"role": "user", "content": "東京の天気はどうですか"},
            {"role": "assistant", "content": "今日の東京は晴れです。大阪は雨です。"},
            {"role": "user", "content": "서울 날씨는 어때요?"},
        ],
    )
    hits = store.search(P, "東京の天気")  # no spaces: unicode61 would see one word
    assert [h.snippet for h in hits] and hits[0].role == "user" and ">>>東京の天気<<<" in hits[0].snippet
    assert len(store.search(P, "東京")) == 2  # two characters: below a trigram, still found
    assert [h.role for h in store.search(P, "東京 晴れ")] == ["assistant"]
    assert [h.role for h in store.search(P, "날씨는")] == ["user"]
    assert store.search(P, "京都") == []


def test_search_falls_back_to_substrings(store: Store) -> None:
    session = store.create_session(P)
    store.add_message(session.id, {"role": "tool", "content": "ModuleNotFoundError: No module named 'yaml'"})
    assert store.search(P, "NotFound")[0].snippet.count(">>>") == 1  # inside a longer word
    assert store.search(P, "notfound modulenot")[0].role == "tool"
    assert store.search(P, "ul") == []  # too short to be a substring query
    assert store.search(P, "notfound zebra") == []


def test_hostile_queries_never_raise(store: Store) -> None:
    session = store.create_session(P)
    store.add_message(session.id, {"role": "user", "content": "kubernetes deploy 100% done_ok a'b (x)"})
    for query in HOSTILE:
        hits = store.search(P, query)
        assert isinstance(hits, list), query
    assert [h.role for h in store.search(P, "(kubernetes")] == ["user"]
    assert [h.role for h in store.search(P, "NEAR(kubernetes deploy, 2)")] == []  # "2" is a required term
    assert store.search(P, "kubernetes AND deploy") == []  # AND is a word like any other, absent here
    assert [h.role for h in store.search(P, "kubernetes OR nothing")] == []
    assert [h.role for h in store.search(P, "-kubernetes")] == ["user"]  # no operators: a plain word
    assert store.search(P, "messages") == []


def test_concurrent_writers_lose_nothing(store: Store) -> None:
    threads_n, per_thread = 8, 40
    shared = store.create_session(P)
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads_n)

    def work(n: int) -> None:
        try:
            barrier.wait()
            own = store.create_session(P, title=f"thread {n}")
            for i in range(per_thread):
                store.add_message(own.id, {"role": "user", "content": f"thread{n} message {i}"}, cost=0.5)
                reply = {"role": "assistant", "content": f"shared {n} {i}"}
                store.add_message(shared.id, reply, prompt_tokens=1)
                if i % 10 == 0:
                    store.search(P, f"thread{n}")
                    store.list_sessions(P)
        except BaseException as exc:  # reported below, with the thread's failure
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads_n)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    shared_now = store.get_session(shared.id, P)
    assert shared_now is not None
    assert (shared_now.message_count, shared_now.prompt_tokens) == (threads_n * per_thread,) * 2
    assert len(store.messages(shared.id)) == threads_n * per_thread
    sessions = [s for s in store.list_sessions(P) if s.id != shared.id]
    assert len(sessions) == threads_n
    assert all(s.message_count == per_thread and s.cost == per_thread * 0.5 for s in sessions)
    assert len(store.search(P, "thread3", limit=100)) == per_thread


def test_sqlite_runs_in_wal_with_foreign_keys(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    with Store(f"sqlite:///{path}") as store:
        session = store.create_session(P)
        store.add_message(session.id, {"role": "user", "content": "hi"})
        assert (tmp_path / "h.db-wal").exists()
        raw = sqlite3.connect(path)
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)  # persistent in the file
        # A connection of the store's own: PRAGMA foreign_keys is per connection.
        with store._engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30_000
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        raw.close()


def test_reopening_keeps_data_and_refuses_newer_schemas(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/h.db"
    with Store(url) as store:
        session = store.create_session(P, title="persisted")
        store.add_message(session.id, {"role": "user", "content": "still searchable"})
    with Store(url) as store:
        assert [s.title for s in store.list_sessions(P)] == ["persisted"]
        assert [h.session_id for h in store.search(P, "searchable")] == [session.id]
    raw = sqlite3.connect(tmp_path / "h.db")
    with raw:
        raw.execute("UPDATE store_meta SET value = '99' WHERE key = 'schema_version'")
    raw.close()
    with pytest.raises(StoreError, match="schema version 99.*upgrade Hermetic"):
        Store(url)


def test_bad_urls_raise_clear_errors(tmp_path: Path, postgres: LocalPostgres) -> None:
    with pytest.raises(StoreError, match="not a database URL"):
        Store("hermetic.db")
    with pytest.raises(StoreError, match="unsupported database 'mysql'"):
        Store("mysql://u@localhost/db")
    with pytest.raises(StoreError, match="needs a database file"):
        Store("sqlite://")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StoreError, match="cannot create the directory"):
        Store(f"sqlite:///{blocker}/sub/h.db")
    with pytest.raises(StoreError, match=r"cannot open the database at postgresql\+psycopg://u:\*\*\*@127"):
        Store(f"postgresql://u:hunter2@127.0.0.1:{_closed_port()}/db")
    with pytest.raises(StoreError, match="does not exist"):
        Store(postgres.url("no_such_db"))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_records_outlive_their_database_session(store: Store) -> None:
    session = store.create_session(P, title="t")
    store.add_message(session.id, {"role": "user", "content": "x"})
    listed = store.list_sessions(P)
    store.update_session(session.id, title="changed")
    assert isinstance(listed[0], SessionRecord) and listed[0].title == "t"  # a snapshot, not a live row
    assert listed[0].model_dump()["message_count"] == 1


def test_a_schema_2_database_gains_the_reasoning_column_and_keeps_its_messages(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    with Store(url) as store:
        session = store.create_session("default", title="before")
        store.add_messages(session.id, [{"role": "user", "content": "kept"}])
    db = sqlite3.connect(tmp_path / "old.db")  # as Hermetic of schema 2 left it
    db.execute("ALTER TABLE messages DROP COLUMN reasoning")
    db.execute("ALTER TABLE sessions DROP COLUMN workspace")  # schema 4's
    db.execute("UPDATE store_meta SET value = '2' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with Store(url) as store:
        store.add_message(session.id, {"role": "assistant", "content": "ok"}, reasoning="thought")
        assert [m["content"] for m in store.history(session.id)] == ["kept", "ok"]
    db = sqlite3.connect(tmp_path / "old.db")
    try:
        assert db.execute("SELECT value FROM store_meta WHERE key = 'schema_version'").fetchone() == ("4",)
        assert db.execute("SELECT reasoning FROM messages ORDER BY id").fetchall() == [(None,), ("thought",)]
        assert db.execute("SELECT workspace FROM sessions").fetchall() == [(None,)]
    finally:
        db.close()
