"""The store's conversation bindings (store/bindings.py), on SQLite and PostgreSQL: which session an
outside conversation is talking to, for the gateway, /v1, A2A and MCP alike; and the bindings older
releases kept elsewhere, taken over once."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from sqlalchemy import text

from control_plane.api.conversation_keys import take_over
from control_plane.gateway.records import GatewayStore
from control_plane.store import Store
from control_plane.store.bindings import Bindings, ResetPolicy
from control_plane.store.records import BindingRecord


def test_a_binding_is_kept_per_profile_and_surface_and_outlives_the_store(store: Store) -> None:
    mine, theirs = Bindings(store.engine, "default"), Bindings(store.engine, "work")
    mine.bind("openai", "k", "s-1")
    mine.bind("a2a", "k", "s-2")
    theirs.bind("openai", "k", "s-3")
    assert mine.get("openai", "k").session_id == "s-1"  # type: ignore[union-attr]
    assert mine.get("a2a", "k").session_id == "s-2"  # type: ignore[union-attr]
    assert theirs.get("openai", "k").session_id == "s-3"  # type: ignore[union-attr]
    assert mine.get("mcp", "k") is None
    with Store(store.engine.url.render_as_string(hide_password=False)) as reopened:
        again = Bindings(reopened.engine, "default")
        assert again.get("openai", "k").session_id == "s-1"  # type: ignore[union-attr]
        mine.forget("openai", "k")
        assert again.get("openai", "k") is None and again.get("a2a", "k") is not None


def test_the_clock_restarts_only_with_another_session(store: Store) -> None:
    bindings = Bindings(store.engine, "default")
    bindings.bind("gateway", "telegram:1", "s-1")
    first = bindings.get("gateway", "telegram:1")
    assert first is not None
    bindings.bind("gateway", "telegram:1", "s-1")
    same = bindings.get("gateway", "telegram:1")
    assert same is not None and same.started_at == first.started_at and same.last_at >= first.last_at
    bindings.bind("gateway", "telegram:1", "s-2")  # /new, or the reset policy's new session
    other = bindings.get("gateway", "telegram:1")
    assert other is not None and other.session_id == "s-2" and other.started_at >= first.last_at


def test_keep_forgets_the_least_recently_used_of_that_surface_only(store: Store) -> None:
    bindings = Bindings(store.engine, "default")
    bindings.bind("a2a", "context", "s-a2a")
    for n in range(4):
        bindings.bind("openai", f"k-{n}", f"s-{n}", keep=3)
    assert bindings.get("openai", "k-0") is None
    bindings.bind("openai", "k-1", "s-1b", keep=3)  # bound again: the most recent now
    bindings.bind("openai", "k-4", "s-4", keep=3)
    kept = {
        k: (found.session_id if (found := bindings.get("openai", k)) else None)
        for k in ("k-1", "k-2", "k-3", "k-4")
    }
    assert kept == {"k-1": "s-1b", "k-2": None, "k-3": "s-3", "k-4": "s-4"}
    assert bindings.get("a2a", "context") is not None


def test_the_reset_policies() -> None:
    now = time.time()
    day = 86_400.0
    bound = BindingRecord(
        profile="p", surface="gateway", key="k", session_id="s", started_at=now - 2 * day, last_at=now - 60
    )
    assert not ResetPolicy("never").expired(bound, now)
    assert ResetPolicy("daily").expired(bound, now)  # began two days ago
    assert not ResetPolicy("idle", idle_hours=1).expired(bound, now)  # used a minute ago
    assert ResetPolicy("idle", idle_hours=0.01).expired(bound, now)  # 36 s


def test_the_v1_and_a2a_key_files_of_older_releases_are_taken_over_once(store: Store, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "openai-conversations.json").write_text(json.dumps({"k-json": "s-json", "k-bad": 3}))
    db = sqlite3.connect(home / "openai-conversations.sqlite3")
    db.execute("CREATE TABLE conversations (key TEXT PRIMARY KEY, session TEXT NOT NULL)")
    db.executemany(
        "INSERT INTO conversations VALUES (?, ?)",
        [("k-db", "s-db"), ("a2a:ctx", "s-ctx"), ("k-mine", "s-old")],
    )
    db.commit()
    db.close()
    bindings = Bindings(store.engine, "default")
    bindings.bind("openai", "k-mine", "s-new")  # bound since: kept as it is
    take_over(home, bindings)
    found = {
        (s, k): (b.session_id if (b := bindings.get(s, k)) else None)
        for s, k in [
            ("openai", "k-json"),
            ("openai", "k-bad"),
            ("openai", "k-db"),
            ("a2a", "ctx"),
            ("openai", "a2a:ctx"),
            ("openai", "k-mine"),
        ]
    }  # type: ignore[arg-type]
    assert found == {
        ("openai", "k-json"): "s-json",
        ("openai", "k-bad"): None,
        ("openai", "k-db"): "s-db",
        ("a2a", "ctx"): "s-ctx",
        ("openai", "a2a:ctx"): None,
        ("openai", "k-mine"): "s-new",
    }
    assert sorted(p.name for p in home.iterdir()) == [], "the old files are gone"
    take_over(home, bindings)  # nothing left to take: a no-op


def test_the_gateways_chat_table_of_older_releases_is_read_then_dropped(store: Store) -> None:
    gateway = GatewayStore(store.engine.url.render_as_string(hide_password=False))
    try:
        with store.engine.begin() as conn:
            conn.execute(
                text(
                    "CREATE TABLE gateway_chats "
                    "(key TEXT PRIMARY KEY, session_id TEXT, started_at FLOAT, last_at FLOAT)"
                )
            )
            conn.execute(text("INSERT INTO gateway_chats VALUES ('telegram:1', 's-1', 10.0, 20.0)"))
        rows = gateway.take_over_chats()
        assert rows == [("telegram:1", "s-1", 10.0, 20.0)]
        bindings = Bindings(store.engine, "default")
        assert bindings.take_over("gateway", rows) == 1
        gateway.drop_chats()
        assert gateway.take_over_chats() == []
        bound = bindings.get("gateway", "telegram:1")
        assert bound is not None and (bound.session_id, bound.started_at, bound.last_at) == (
            "s-1",
            10.0,
            20.0,
        )
    finally:
        gateway.close()
