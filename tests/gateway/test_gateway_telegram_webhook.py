"""The gateway on Telegram in webhook mode: python-telegram-bot sets the webhook on the Bot API stand-in
(tests/standins/telegram_standin.py), which POSTs each update to the gateway's listener with the secret token
header and retries what was not answered 2xx; the scripted model behind the agent."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import OWNER, Running, gateway_settings, wait_answered
from gateway_process import SCRIPT, answered_once_after_restart, gateway_profile, kill_9_while_replying
from telegram_standin import TOKEN, TelegramStandin

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


@pytest.fixture
def standin() -> Iterator[TelegramStandin]:
    server = TelegramStandin()
    yield server
    server.close()


def _webhook(**extra: Any) -> dict[str, Any]:
    """Webhook-mode settings, the listener on a free port that the public URL (here: loopback) names."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return {"mode": "webhook", "port": port, "webhook_url": f"http://127.0.0.1:{port}/telegram", **extra}


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"} | headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 (loopback)
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_a_message_is_answered_and_a_redelivered_update_is_answered_once(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    fake_llm.load([{"text": "hello over the webhook"}, {"text": "second answer"}])
    settings = gateway_settings(tmp_path, fake_llm.url, standin, **_webhook())
    with Running(settings) as gateway:
        update = standin.user_says(OWNER, "hi via webhook")
        wait_answered(gateway, 1)
        assert [m.text for m in standin.bot_messages(OWNER)] == ["hello over the webhook"]
        (set_call,) = standin.called("setWebhook")
        assert standin.webhook is not None and standin.webhook["max_connections"] == 1
        assert set_call["allowed_updates"] == ["message", "callback_query"]
        adapter = gateway.adapters["telegram"]
        kept = gateway.store.get_state(f"{adapter.lock_name}:webhook_secret")
        assert kept and standin.webhook["secret_token"] == kept, "a generated secret, kept in the profile"
        assert standin.called("getUpdates") == [], "no polling in webhook mode"
        standin.resend(update)  # its 200 was lost: Telegram sends the same update_id again
        standin.wait_for(lambda: [s for u, s in standin.webhook_posts if u == update["update_id"]][1:])
        # after a week without updates Telegram picks the next update_id at random: a lower one is new
        standin.user_says(OWNER, "and again", update_id=update["update_id"] - 50)
        wait_answered(gateway, 2)
    assert [m.text for m in standin.bot_messages(OWNER)] == ["hello over the webhook", "second answer"]
    assert len(fake_llm.requests) == 2, "the redelivery reached no model"
    assert [s for u, s in standin.webhook_posts if u == update["update_id"]] == [200, 200]
    assert standin.webhook is not None, "stopping leaves the webhook set: Telegram keeps what comes meanwhile"


def test_a_request_without_the_exact_secret_token_is_refused_and_nothing_is_stored(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    os.environ["HERMETIC_TEST_TG_SECRET"] = "the-right_secret-42"
    config = _webhook(webhook_secret="${HERMETIC_TEST_TG_SECRET}")
    try:
        settings = gateway_settings(tmp_path, fake_llm.url, standin, **config)
    finally:
        del os.environ["HERMETIC_TEST_TG_SECRET"]
    with Running(settings) as gateway:
        standin.wait_for(lambda: standin.webhook)
        assert standin.webhook["secret_token"] == "the-right_secret-42", "the secret from the environment"
        update = {
            "update_id": 7,
            "message": {"message_id": 1, "date": 0, "chat": {"id": OWNER, "type": "private"},
                        "from": {"id": OWNER, "is_bot": False, "first_name": "x"}, "text": "forged"},
        }  # fmt: skip
        body = json.dumps(update).encode()
        url = config["webhook_url"]
        assert _post(url, body, {}) == 401
        assert _post(url, body, {SECRET_HEADER: "the-wrong_secret-42"}) == 403
        assert _post(url, body, {SECRET_HEADER: "the-right_secret-4"}) == 403, "a prefix is not the secret"
        assert _post(url, b"{not json", {SECRET_HEADER: "the-right_secret-42"}) == 400
        assert gateway.store.last_inbound("telegram") is None and fake_llm.requests == []
        assert gateway.store.get_state(f"{gateway.adapters['telegram'].lock_name}:offset") is None


def test_polling_mode_deletes_a_webhook_left_set_since_getupdates_is_refused_while_one_is(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    set_url = f"{standin.base_url}{TOKEN}/setWebhook"
    assert _post(set_url, json.dumps({"url": "http://127.0.0.1:9/telegram"}).encode(), {}) == 200
    get_updates = f"{standin.base_url}{TOKEN}/getUpdates"
    assert _post(get_updates, b"{}", {}) == 409, "the Bot API refuses polling while a webhook is set"
    fake_llm.load([{"text": "polled again"}])
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.user_says(OWNER, "hello")
        wait_answered(gateway, 1)
    assert standin.webhook is None and [m.text for m in standin.bot_messages(OWNER)] == ["polled again"]


def test_a_kill_9_mid_turn_and_a_message_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    config = {"token": TOKEN, "base_url": standin.base_url, "base_file_url": standin.base_file_url,
              "allow_users": [str(OWNER)], **_webhook()}  # fmt: skip
    env = gateway_profile(tmp_path, fake_llm.url, "telegram", config)
    kill_9_while_replying(
        env,
        lambda: standin.user_says(OWNER, "question one"),  # redelivered until the gateway listens
        lambda: standin.wait_for(lambda: standin.called("editMessageText")),
    )
    # sent while no gateway listens: the stand-in retries it until the restarted gateway answers 2xx
    later = standin.user_says(OWNER, "sent while the gateway was down")

    def texts() -> list[str]:
        return [m.text for m in standin.bot_messages(OWNER)]

    answered_once_after_restart(env, "telegram", texts, standin.wait_for, fake_llm)
    tries = [s for u, s in standin.webhook_posts if u == later["update_id"]]
    assert tries[-1] == 200 and 0 in tries, "sent while down: retried until the restarted gateway stored it"
    assert len(standin.called("setWebhook")) == 2, "each run sets the webhook with the same secret"
    first, second = standin.called("setWebhook")
    assert first["secret_token"] == second["secret_token"]
