"""Approvals on Discord as buttons: discord.py sends the question with an action row, the stand-in
(tests/standins/discord_standin.py) presses a button as a given user (INTERACTION_CREATE over the
gateway WebSocket) and takes the interaction's answer at its callback endpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from discord_standin import TOKEN, DiscordStandin
from gateway_harness import Running, asking_registry, gateway_settings, wait_answered

from control_plane.gateway.gateway import CLOSED

OPEN_PORT = [{"tool_calls": [{"name": "open_port", "arguments": {"port": 7000}}]}, {"text": "Done."}]


@pytest.fixture
def discord_api() -> Iterator[DiscordStandin]:
    server = DiscordStandin()
    yield server
    server.close()


def _settings(tmp_path: Path, llm_url: str, api: DiscordStandin, **extra: Any) -> Any:
    config = {"token": TOKEN, "api_base": api.api_base, "allow_users": ["501"], "edit_interval": 0.05} | extra
    settings = gateway_settings(tmp_path, llm_url, None, gateway={"discord": config})
    return settings.model_copy(update={"toolsets": ["test"]})


def _prompt(api: DiscordStandin, channel: str = "777") -> tuple[str, dict[str, dict[str, Any]]]:
    """The bot's message with buttons in the channel: its id, and its buttons by label."""

    def shown() -> dict[str, Any] | None:
        return next((dict(m) for m in api.history.get(channel, []) if m["components"]), None)

    message = api.wait_for(shown)
    (row,) = message["components"]
    assert row["type"] == 1, "one action row"
    return message["id"], {button["label"]: button for button in row["components"]}


def _decided(api: DiscordStandin, message_id: str, answer: str) -> None:
    """The prompt was edited to show the decision, and its buttons are gone."""
    api.wait_for(lambda: not api.components(message_id))
    content = api.wait_for(lambda: api.messages[message_id]["content"])
    assert content.startswith("Expose port 7000?") and content.endswith(f"→ {answer}")


def _tool_result(fake_llm: Any) -> str:
    return str(fake_llm.requests[1]["messages"][-1]["content"])


def test_approve_by_button_runs_the_tool_and_the_prompt_shows_the_decision_without_buttons(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    fake_llm.load(OPEN_PORT)
    with Running(_settings(tmp_path, fake_llm.url, discord_api), asking_registry(timeout=300)) as gateway:
        discord_api.user_says("777", "open port 7000")
        prompt, buttons = _prompt(discord_api)
        assert {label: b["style"] for label, b in buttons.items()} == {"once": 3, "always": 3, "no": 4}
        assert all(b["type"] == 2 and b["custom_id"].endswith(f":{label}") for label, b in buttons.items())
        pressed = discord_api.press(prompt, buttons["once"]["custom_id"])
        wait_answered(gateway, 2)  # the message and the press
        assert discord_api.answers(pressed) == [{"type": 6}], "DEFERRED_UPDATE_MESSAGE, then the edit"
        assert _tool_result(fake_llm) == "answer: once"
        _decided(discord_api, prompt, "once")
        assert discord_api.contents("777")[-1] == "Done."


def test_deny_by_button_refuses(tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin) -> None:
    fake_llm.load(OPEN_PORT)
    with Running(_settings(tmp_path, fake_llm.url, discord_api), asking_registry(timeout=300)) as gateway:
        discord_api.user_says("777", "open port 7000")
        prompt, buttons = _prompt(discord_api)
        pressed = discord_api.press(prompt, buttons["no"]["custom_id"])
        wait_answered(gateway, 2)
        assert discord_api.answers(pressed) == [{"type": 6}]
        assert _tool_result(fake_llm) == "answer: no"
        _decided(discord_api, prompt, "no")


def test_a_press_by_a_user_not_allowed_is_refused_and_the_approval_stays_pending(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    fake_llm.load(OPEN_PORT)
    settings = _settings(tmp_path, fake_llm.url, discord_api, pairing=False)
    with Running(settings, asking_registry(timeout=300)) as gateway:
        discord_api.user_says("777", "open port 7000")
        prompt, buttons = _prompt(discord_api)
        stranger = discord_api.press(prompt, buttons["always"]["custom_id"], user="666")
        discord_api.wait_for(lambda: discord_api.answers(stranger))
        assert discord_api.answers(stranger) == [{"type": 6}], "acknowledged, never explained"
        assert len(fake_llm.requests) == 1 and discord_api.components(prompt), "still asking"
        owner = discord_api.press(prompt, buttons["no"]["custom_id"])
        wait_answered(gateway, 2)
        assert discord_api.answers(owner) == [{"type": 6}]
        assert _tool_result(fake_llm) == "answer: no", "the stranger's 'always' did not count"
        _decided(discord_api, prompt, "no")


def test_a_press_for_an_approval_no_longer_open_gets_an_ephemeral_answer_and_changes_nothing(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    fake_llm.load([{"text": "hello"}])
    stale = [{"type": 1, "components": [
        {"type": 2, "style": 3, "label": "once", "custom_id": "q:0123456789ab:once"},
    ]}]  # fmt: skip
    with Running(_settings(tmp_path, fake_llm.url, discord_api), asking_registry(timeout=300)) as gateway:
        discord_api.user_says("777", "hi")
        wait_answered(gateway, 1)
        old = discord_api.bot_posted("777", "Expose port 9?", stale)  # left by an earlier run
        before = discord_api.contents("777")
        pressed = discord_api.press(old, "q:0123456789ab:once")
        (answer,) = discord_api.wait_for(lambda: discord_api.answers(pressed))
        wait_answered(gateway, 2)
    assert answer["type"] == 4 and answer["data"]["flags"] == 64 and answer["data"]["content"] == CLOSED
    assert discord_api.contents("777") == before, "the ephemeral answer is not in the channel"
    assert discord_api.components(old) == stale
    assert len(fake_llm.requests) == 1


def test_a_double_press_is_answered_once(tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin) -> None:
    fake_llm.load(OPEN_PORT)
    with Running(_settings(tmp_path, fake_llm.url, discord_api), asking_registry(timeout=300)) as gateway:
        discord_api.user_says("777", "open port 7000")
        prompt, buttons = _prompt(discord_api)
        presses = [discord_api.press(prompt, buttons["once"]["custom_id"]) for _ in range(2)]
        wait_answered(gateway, 3)
        answers = [discord_api.wait_for(lambda p=p: discord_api.answers(p)) for p in presses]
    assert sorted(a[0]["type"] for a in answers) == [4, 6], "one took effect, the other heard it did not"
    (late,) = [a[0] for a in answers if a[0]["type"] == 4]
    assert late["data"]["flags"] == 64 and late["data"]["content"] == CLOSED
    assert _tool_result(fake_llm) == "answer: once" and len(fake_llm.requests) == 2, "the tool ran once"
    assert all(len(a) == 1 for a in answers)


def test_in_a_guild_channel_with_a_session_per_user_a_press_on_another_users_approval_changes_nothing(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    fake_llm.load(OPEN_PORT)
    settings = _settings(
        tmp_path, fake_llm.url, discord_api, allow_chats=["888"], session_per_user_in_groups=True
    )
    with Running(settings, asking_registry(timeout=300)) as gateway:
        discord_api.user_says("888", "open port 7000", guild="1")
        prompt, buttons = _prompt(discord_api, "888")
        other = discord_api.press(prompt, buttons["always"]["custom_id"], user="502", guild="1")
        (answer,) = discord_api.wait_for(lambda: discord_api.answers(other))
        assert answer["type"] == 4 and answer["data"]["flags"] == 64, "only the presser hears it"
        asker = discord_api.press(prompt, buttons["once"]["custom_id"], guild="1")
        wait_answered(gateway, 3)
        assert discord_api.answers(asker) == [{"type": 6}]
        assert _tool_result(fake_llm) == "answer: once", "502's 'always' did not count"
        _decided(discord_api, prompt, "once")


def test_when_a_press_was_the_last_thing_stored_the_backfill_reads_on_from_it(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    fake_llm.load([*OPEN_PORT, {"text": "caught up"}])
    settings = _settings(tmp_path, fake_llm.url, discord_api)
    with Running(settings, asking_registry(timeout=300)) as gateway:
        discord_api.user_says("777", "open port 7000")
        prompt, buttons = _prompt(discord_api)
        discord_api.press(prompt, buttons["once"]["custom_id"])
        wait_answered(gateway, 2)
    discord_api.user_says("777", "sent while the gateway was down", live=False)
    with Running(settings, asking_registry(timeout=300)) as gateway:
        wait_answered(gateway, 3)
    assert discord_api.contents("777")[-1] == "caught up"
    assert fake_llm.requests[2]["messages"][-1]["content"] == "sent while the gateway was down"
