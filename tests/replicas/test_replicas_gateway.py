"""The chat gateway inside replicas of `hermetic serve` on one PostgreSQL: one replica holds the bot token
and answers, the others stand by; when the holder is SIGKILLed another takes the token over within the
lock's lease and answers what came meanwhile (the Telegram stand-in, python-telegram-bot as the client)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_harness import OWNER
from gateway_process import create_lock_name, write_config
from hermetic_cli import scripted_env
from ngircd import free_port
from postgres import LocalPostgres
from replica_set import ReplicaProcess, replica_env, start_replicas, until
from telegram_standin import TOKEN, TelegramStandin

from control_plane.gateway.records import GatewayStore
from control_plane.models.fake_llm import FakeLLM

LOCK = create_lock_name()


@pytest.fixture
def standin() -> Iterator[TelegramStandin]:
    server = TelegramStandin()
    yield server
    server.close()


def test_the_gateway_fails_over_to_another_replica_when_its_holder_is_killed(
    tmp_path: Path, postgres: LocalPostgres, standin: TelegramStandin
) -> None:
    database = postgres.create_database()
    url = postgres.url(database)
    with FakeLLM([{"text": "answer one"}, {"text": "answer two"}]) as model:
        # a lock renewed every 3.3 s: a holder on loaded cores keeps it (a 3 s one was lost, and taken)
        write_config(tmp_path, model.url, standin, in_serve=True, lock_ttl=10)
        env = replica_env(scripted_env(tmp_path, model.url), url, TG_TOKEN=TOKEN)
        replicas: list[ReplicaProcess] = []
        store = GatewayStore(url)
        try:
            replicas += start_replicas(env, [free_port(), free_port()])
            until(lambda: store.lock(LOCK) is not None, "a replica to take the bot token")
            standin.user_says(OWNER, "question one")
            standin.wait_for(lambda: _said(standin, "answer one"), timeout=60)
            until(lambda: not store.unanswered("telegram"), "question one to be marked answered")

            held = store.lock(LOCK)
            assert held is not None
            holder = next(r for r in replicas if r.proc is not None and r.proc.pid == held.pid)
            holder.kill()
            moved = lambda: (store.lock(LOCK) or held).pid != held.pid  # noqa: E731
            survivor = next(r for r in replicas if r is not holder)
            try:
                until(moved, "the other replica to take the bot token over")
            except AssertionError as exc:  # what the survivor said shows why
                raise AssertionError(f"{exc}: {''.join(survivor.said)[-3000:]}") from None
            standin.user_says(OWNER, "question two")
            standin.wait_for(lambda: _said(standin, "answer two"), timeout=60)

            texts = [m.text for m in standin.bot_messages(OWNER)]
            assert [sum(a in t for t in texts) for a in ("answer one", "answer two")] == [1, 1], texts
            assert len(model.requests) == 2, model.requests  # each question answered once
        finally:
            for replica in replicas:
                replica.stop()
            store.close()
            postgres.drop_database(database)


def _said(standin: TelegramStandin, text: str) -> bool:
    return any(text in m.text for m in standin.bot_messages(OWNER))
