"""The gateway's promises under failure: a kill -9 between receipt and reply is answered exactly once
after the restart (and what came in meanwhile too), one gateway per bot token (a lock in the store,
on SQLite and PostgreSQL), and a platform that drops away is reconnected with backoff."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import OWNER, Running, gateway_settings, wait_answered
from gateway_process import create_lock_name, write_config
from postgres import LocalPostgres
from telegram_standin import TelegramStandin

from control_plane.gateway import GatewayLocked, create_gateway
from control_plane.gateway.records import GatewayStore


@pytest.fixture
def standin() -> Iterator[TelegramStandin]:
    server = TelegramStandin()
    yield server
    server.close()


def _gateway(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "control_plane", "gateway", "run"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _polls(standin: TelegramStandin) -> int:
    return len(standin.called("getUpdates"))


def test_a_kill_9_between_receipt_and_reply_is_answered_exactly_once_after_restart(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(
        [
            {"text": "a slow reply that is cut off by the kill " * 5, "pace": 0.3},
            {"text": "answer one"},
            {"text": "answer two"},
        ]
    )
    env = write_config(tmp_path, fake_llm.url, standin)
    first = _gateway(env)
    try:
        standin.wait_for(lambda: _polls(standin) >= 1)
        second = subprocess.run(
            [sys.executable, "-m", "control_plane", "gateway", "run"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert second.returncode == 3, second.stderr
        assert "another gateway is running for this telegram bot" in second.stderr

        standin.user_says(OWNER, "question one")
        standin.wait_for(lambda: standin.called("editMessageText"))  # the reply is out and being edited
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
        first.wait(10)
    standin.user_says(OWNER, "sent while the gateway was down")

    again = _gateway(env)
    try:
        joined = lambda: "\n".join(m.text for m in standin.bot_messages(OWNER))  # noqa: E731
        # the message sent meanwhile is answered on its own or, arriving while the rerun runs, steers it
        standin.wait_for(lambda: "answer one" in joined() and "answer two" in joined(), timeout=60)
        status = subprocess.run(
            [sys.executable, "-m", "control_plane", "gateway", "status"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert "telegram: connected" in status.stdout, status.stdout + status.stderr
        assert "0 waiting" in status.stdout
        again.send_signal(signal.SIGINT)
        assert again.wait(30) == 0, "Ctrl-C stops the gateway cleanly"
    finally:
        again.kill()
        again.wait(10)
    assert len(fake_llm.requests) == 3, "the cut-off turn ran again once, the other message once"
    messages = standin.bot_messages(OWNER)
    assert messages[0].text.startswith("answer one"), "the rerun edited the reply the killed run had begun"
    assert not any("slow reply" in m.text for m in messages)
    text = "\n".join(m.text for m in messages)
    assert text.count("answer one") == 1 and text.count("answer two") == 1
    store = GatewayStore(f"sqlite:///{tmp_path / 'hermetic.db'}")
    try:
        assert store.unanswered("telegram") == []
        assert store.lock(create_lock_name()) is None, "a clean stop releases the token's lock"
    finally:
        store.close()


def test_a_second_gateway_for_the_same_token_refuses_to_start(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    settings = gateway_settings(tmp_path, fake_llm.url, standin)
    with Running(settings):
        other = create_gateway(settings)
        try:
            with pytest.raises(GatewayLocked, match="one gateway per bot token"):
                Running_call(other.start())
        finally:
            other.agent.close()
            other.store.close()


def Running_call(coro: Any) -> Any:  # noqa: N802
    import asyncio

    return asyncio.run(coro)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/hermetic.db"
        return
    server: LocalPostgres = request.getfixturevalue("postgres")
    with server.fresh_database() as url:
        yield url


def test_the_bot_token_lock_holds_across_stores_until_released_or_stale(database_url: str) -> None:
    one, two = GatewayStore(database_url), GatewayStore(database_url)  # as two machines would
    try:
        assert one.acquire("telegram:abc", "gw-one", ttl=30) is None
        held = two.acquire("telegram:abc", "gw-two", ttl=30)
        assert held is not None and held.holder == "gw-one"
        assert one.renew("telegram:abc", "gw-one", ttl=30)
        assert not two.renew("telegram:abc", "gw-two", ttl=30)
        one.release("telegram:abc", "gw-one")
        assert two.acquire("telegram:abc", "gw-two", ttl=0.2) is None
        time.sleep(0.3)  # the holder stopped renewing: its lock goes stale
        assert one.acquire("telegram:abc", "gw-one", ttl=30) is None, "a stale lock is taken over"
        dead = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
        )
        with one._write() as conn:  # a holder on this host whose process is gone (killed)
            from sqlalchemy import update

            from control_plane.gateway.records import LockRecord

            conn.execute(update(LockRecord).values(pid=int(dead.stdout), holder="gw-dead"))
        assert two.acquire("telegram:abc", "gw-two", ttl=30) is None, "a dead holder's lock is taken over"
    finally:
        one.close()
        two.close()


def test_polls_failing_and_the_api_restarting_are_reconnected(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    fake_llm.load([{"text": "through the 502s"}, {"text": "after the restart"}])
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.wait_for(lambda: _polls(standin) >= 1)
        standin.fail_polls(3)
        standin.user_says(OWNER, "are you there?")
        wait_answered(gateway, 1)
        standin.restart(down_for=1.0)
        standin.user_says(OWNER, "and now?")
        wait_answered(gateway, 2)
        texts = [m.text for m in standin.bot_messages(OWNER)]
        assert texts == ["through the 502s", "after the restart"]
        status = gateway.status["telegram"]
        assert status.state == "connected"
        assert any("Bad Gateway" in error for error in status.errors)


def test_hermetic_serve_runs_the_gateway_when_configured(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load([{"text": "answered from inside serve"}])
    env = write_config(tmp_path, fake_llm.url, standin, in_serve=True) | {"HERMETIC_API__PORT": "0"}
    served = subprocess.Popen(
        [sys.executable, "-m", "control_plane", "serve"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        standin.user_says(OWNER, "are you in there?")
        standin.wait_for(
            lambda: any("inside serve" in m.text for m in standin.bot_messages(OWNER)), timeout=60
        )
        served.send_signal(signal.SIGINT)
        assert served.wait(30) == 0, "Ctrl-C ends both"
    finally:
        served.kill()
        _, errors = served.communicate(timeout=10)
    assert "gateway: serving telegram" in errors and "gateway: stopping" in errors, errors
    store = GatewayStore(f"sqlite:///{tmp_path / 'hermetic.db'}")
    try:
        assert store.lock(create_lock_name()) is None, "the gateway stopped cleanly: its lock is released"
    finally:
        store.close()


def test_inbound_messages_and_pairing_codes_in_the_store(database_url: str) -> None:
    from control_plane.gateway.records import PairingRecord

    store = GatewayStore(database_url)
    try:
        first = store.receive("telegram", "42", "7", {"text": "hi"})
        assert first is not None
        assert store.receive("telegram", "42", "7", {"text": "hi"}) is None, "a redelivery is recognised"
        assert store.receive("telegram", "43", "7", {"text": "other chat"}) is not None
        assert [r.payload["text"] for r in store.unanswered("telegram")] == ["hi", "other chat"]
        store.mark(first, state="answered", reply_id="99")
        assert [r.chat for r in store.unanswered("telegram")] == ["43"]
        assert store.inbound(first).reply_id == "99"  # type: ignore[union-attr]
        store.receive("telegram", "42", "8", {"text": "later", "thread": None})
        store.receive("telegram", "42", "9", {"text": "in a thread", "thread": "5"})
        store.receive("slack", "42", "10", {"text": "another platform"})
        latest = {(r.chat, r.payload.get("thread")): r.message_id for r in store.latest_per_chat("telegram")}
        assert latest == {("42", None): "8", ("42", "5"): "9", ("43", None): "7"}, "per chat and thread"
        now = time.time()
        store.add_pairing(PairingRecord(code="ABCD2345", platform="telegram", user="5", created_at=now,
                                        expires_at=now + 60))  # fmt: skip
        store.add_pairing(PairingRecord(code="OLDC0DE1", platform="telegram", user="6", created_at=now - 120,
                                        expires_at=now - 60))  # fmt: skip
        assert store.pairing_for("telegram", "5") is not None and store.pending_codes() == 1
        assert store.redeem("OLDC0DE1") is None, "an expired code admits no one"
        assert store.redeem("ABCD2345") is not None and store.admitted("telegram", "5")
        assert store.redeem("ABCD2345") is None and not store.admitted("telegram", "6")
    finally:
        store.close()
