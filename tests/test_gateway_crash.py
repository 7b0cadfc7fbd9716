"""A gateway process killed (kill -9) in the middle of a turn on Discord and on Slack: after the restart
every message is answered exactly once, the one the killed run was answering (its reply edited, not sent
again) and the one sent while no gateway ran (Discord: fetched from the channel's history; Slack: held
and retried by Slack until acknowledged). Telegram's is in test_gateway_reliability.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from discord_standin import TOKEN, DiscordStandin
from gateway_harness import gateway_settings
from slack_standin import APP_TOKEN, BOT_TOKEN, SlackStandin

from control_plane.gateway.records import GatewayStore

SCRIPT = [
    {"text": "a slow reply that is cut off by the kill " * 5, "pace": 0.3},
    {"text": "answer one"},
    {"text": "answer two"},
]


@pytest.fixture
def discord_api() -> Iterator[DiscordStandin]:
    server = DiscordStandin()
    yield server
    server.close()


@pytest.fixture
def slack() -> Iterator[SlackStandin]:
    server = SlackStandin()
    yield server
    server.close()


def _profile(root: Path, llm_url: str, platform: str, config: dict[str, Any]) -> dict[str, str]:
    """A profile whose config.yaml configures one platform; the environment to run the gateway with."""
    settings = {
        "model": {"name": "openai/scripted", "api_base": llm_url, "api_key": "test", "retries": 0},
        "backend": "local",
        "learning": {"enabled": False},
        "gateway": {"lock_ttl": 30, platform: {"edit_interval": 0.05, **config}},
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.yaml").write_text(yaml.safe_dump(settings))
    return {**os.environ, "HERMETIC_ROOT": str(root)}


def _gateway(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "control_plane", "gateway", "run"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@dataclass
class GatewayRun:
    proc: subprocess.Popen[str]
    errors: str = ""
    """What the process said on stderr, once it ended."""


@contextmanager
def restarted(env: dict[str, str]) -> Iterator[GatewayRun]:
    """`with restarted(env) as run:` a gateway process for the block, then Ctrl-C, which must stop it
    cleanly; its stderr is in `run.errors` after the block (and printed, which pytest shows on failure)."""
    run = GatewayRun(_gateway(env))
    try:
        yield run
        run.proc.send_signal(signal.SIGINT)
        assert run.proc.wait(30) == 0, "Ctrl-C stops the gateway cleanly"
    finally:
        run.proc.kill()
        _, run.errors = run.proc.communicate(timeout=10)
        print(run.errors[-3000:])


def _kill_9_while_replying(
    env: dict[str, str], ask: Callable[[], object], replying: Callable[[], Any]
) -> None:
    first = _gateway(env)
    try:
        ask()
        replying()  # the reply is out and being edited
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
        first.wait(10)


def _answered_once_after_restart(
    env: dict[str, str],
    platform: str,
    bot_texts: Callable[[], list[str]],
    wait_for: Callable[..., Any],
    fake_llm: Any,
) -> None:
    with restarted(env) as again:
        # the message sent meanwhile is answered on its own or, arriving while the rerun runs, steers it
        # bounds of a loaded machine: the restart pays the gateway's imports and the first litellm one
        wait_for(lambda: {"answer one", "answer two"} <= set("\n".join(bot_texts()).split("\n")), timeout=180)
        _wait_all_answered(Path(env["HERMETIC_ROOT"]), platform)  # marked once the last edit is out
    assert len(fake_llm.requests) == 3, (
        f"the cut-off turn ran again once, the other message once: {again.errors}"
    )
    texts = bot_texts()
    assert texts[0].startswith("answer one"), "the rerun edited the reply the killed run had begun"
    assert not any("slow reply" in t for t in texts)
    joined = "\n".join(texts)
    assert joined.count("answer one") == 1 and joined.count("answer two") == 1


def _wait_all_answered(root: Path, platform: str, timeout: float = 120) -> None:
    store = GatewayStore(f"sqlite:///{root / 'hermetic.db'}")
    deadline = time.monotonic() + timeout
    try:
        while left := store.unanswered(platform):
            assert time.monotonic() < deadline, f"still unanswered: {left}"
            time.sleep(0.05)
    finally:
        store.close()


def test_discord_a_kill_9_mid_turn_and_a_message_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    config = {"token": TOKEN, "api_base": discord_api.api_base, "allow_users": ["501"]}
    env = _profile(tmp_path, fake_llm.url, "discord", config)
    _kill_9_while_replying(
        env,
        lambda: discord_api.user_says("777", "question one"),  # waits for the gateway's connection
        lambda: discord_api.wait_for(lambda: discord_api.called("PATCH", "/channels/777/messages/")),
    )
    discord_api.user_says("777", "sent while the gateway was down", live=False)
    _answered_once_after_restart(
        env, "discord", lambda: discord_api.contents("777"), discord_api.wait_for, fake_llm
    )
    assert discord_api.called("GET", "/channels/777/messages"), "the missed message came from the history"


def test_slack_a_kill_9_mid_turn_and_a_lost_ack_and_a_message_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    config = {
        "bot_token": BOT_TOKEN,
        "app_token": APP_TOKEN,
        "base_url": slack.base_url,
        "allow_users": ["U1"],
    }
    env = _profile(tmp_path, fake_llm.url, "slack", config)
    slack.lose_acks(1)  # the process dies as its acknowledgement leaves: Slack retries the envelope
    asked: list[dict[str, Any]] = []
    _kill_9_while_replying(
        env,
        lambda: slack.wait_for(slack.connected) and asked.append(slack.user_says("D100", "question one")),
        lambda: slack.wait_for(lambda: slack.called("chat.update")),
    )
    slack.user_says("D100", "sent while the gateway was down")  # held until a connection opens
    _answered_once_after_restart(env, "slack", lambda: slack.texts("D100"), slack.wait_for, fake_llm)
    assert asked[0]["envelope_id"] in slack.acks and asked[0]["retry_attempt"] == 1
    assert slack.pending == {}, "every envelope, the retried one too, was acknowledged"
