"""A gateway process killed (kill -9) in the middle of a turn on Discord and on Slack: after the restart
every message is answered exactly once, the one the killed run was answering (its reply edited, not sent
again) and the one sent while no gateway ran (Discord: fetched from the channel's history; Slack: held
and retried by Slack until acknowledged). Telegram's is in test_gateway_reliability.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from discord_standin import TOKEN, DiscordStandin
from gateway_harness import gateway_settings
from gateway_process import SCRIPT, answered_once_after_restart, gateway_profile, kill_9_while_replying
from slack_standin import APP_TOKEN, BOT_TOKEN, SlackStandin


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


def test_discord_a_kill_9_mid_turn_and_a_message_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    config = {"token": TOKEN, "api_base": discord_api.api_base, "allow_users": ["501"]}
    env = gateway_profile(tmp_path, fake_llm.url, "discord", config)
    kill_9_while_replying(
        env,
        lambda: discord_api.user_says("777", "question one"),  # waits for the gateway's connection
        lambda: discord_api.wait_for(lambda: discord_api.called("PATCH", "/channels/777/messages/")),
    )
    discord_api.user_says("777", "sent while the gateway was down", live=False)
    answered_once_after_restart(
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
    env = gateway_profile(tmp_path, fake_llm.url, "slack", config)
    slack.lose_acks(1)  # the process dies as its acknowledgement leaves: Slack retries the envelope
    asked: list[dict[str, Any]] = []
    kill_9_while_replying(
        env,
        lambda: slack.wait_for(slack.connected) and asked.append(slack.user_says("D100", "question one")),
        lambda: slack.wait_for(lambda: slack.called("chat.update")),
    )
    slack.user_says("D100", "sent while the gateway was down")  # held until a connection opens
    answered_once_after_restart(env, "slack", lambda: slack.texts("D100"), slack.wait_for, fake_llm)
    assert asked[0]["envelope_id"] in slack.acks and asked[0]["retry_attempt"] == 1
    assert slack.pending == {}, "every envelope, the retried one too, was acknowledged"
