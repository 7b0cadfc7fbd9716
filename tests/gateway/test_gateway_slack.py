"""The gateway on Slack: slack_sdk's Socket Mode client and Web API client against the stand-in
(tests/standins/slack_standin.py), the scripted model behind the agent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import Running, asking_registry, gateway_settings, wait_answered
from slack_standin import APP_TOKEN, BOT_TOKEN, SlackStandin


@pytest.fixture
def slack() -> Iterator[SlackStandin]:
    server = SlackStandin()
    yield server
    server.close()


def _settings(tmp_path: Path, llm_url: str, slack: SlackStandin, **extra: Any) -> Any:
    config = {
        "bot_token": BOT_TOKEN, "app_token": APP_TOKEN, "base_url": slack.base_url,
        "allow_users": ["U1"], "edit_interval": 0.05,
    } | extra  # fmt: skip
    return gateway_settings(tmp_path, llm_url, None, gateway={"slack": config})


def test_a_direct_message_is_stored_before_the_ack_and_answered_by_editing_one_message(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin
) -> None:
    reply = " ".join(f"piece{i}" for i in range(60))
    fake_llm.load([{"text": reply, "pace": 0.01}])
    with Running(_settings(tmp_path, fake_llm.url, slack)) as gateway:
        stored_at_ack: list[bool] = []
        slack.on_ack = lambda envelope_id: stored_at_ack.append(
            gateway.store.last_inbound("slack") is not None
        )
        slack.limit_updates(1)
        envelope = slack.user_says("D100", "hello from slack")
        wait_answered(gateway, 1)
        assert slack.acks == [envelope["envelope_id"]] and stored_at_ack == [True]
        assert slack.texts("D100") == [reply]
        assert len(slack.called("chat.postMessage")) == 1 and len(slack.called("chat.update")) >= 2
        sessions = [s for s in gateway.agent.store.list_sessions("default") if s.source == "slack"]
        assert len(sessions) == 1


def test_a_redelivered_envelope_is_acknowledged_but_answered_once(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin
) -> None:
    fake_llm.load([{"text": "only once"}, {"text": "the next one"}])
    with Running(_settings(tmp_path, fake_llm.url, slack)) as gateway:
        envelope = slack.user_says("D100", "hi")
        wait_answered(gateway, 1)
        slack.send_envelope(envelope["type"], envelope["payload"], envelope_id=envelope["envelope_id"])
        slack.user_says("D100", "and again")
        wait_answered(gateway, 2)
        slack.wait_for(lambda: len(slack.acks) == 3)
        assert slack.texts("D100") == ["only once", "the next one"]
        assert len(fake_llm.requests) == 2


def test_a_stranger_in_slack_gets_a_pairing_code_and_nothing_else(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin
) -> None:
    with Running(_settings(tmp_path, fake_llm.url, slack)):
        slack.user_says("D200", "let me in", user="U999")
        (told,) = slack.wait_for(lambda: slack.texts("D200"))
        assert "hermetic gateway pair" in told
        assert fake_llm.requests == []


def test_an_approval_is_a_button_row_and_pressing_one_answers_it(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin
) -> None:
    fake_llm.load([{"tool_calls": [{"name": "open_port", "arguments": {"port": 9000}}]}, {"text": "Opened."}])
    settings = _settings(tmp_path, fake_llm.url, slack).model_copy(update={"toolsets": ["files", "test"]})
    with Running(settings, asking_registry(timeout=300)) as gateway:
        slack.user_says("D100", "open 9000")

        def asked() -> tuple[str, dict[str, Any]] | None:
            for ts, message in slack.messages.items():
                for block in message["blocks"] or []:
                    if block["type"] == "actions":
                        return ts, block
            return None

        ts, actions = slack.wait_for(asked)
        assert [e["text"]["text"] for e in actions["elements"]] == ["once", "always", "no"]
        pressed = actions["elements"][1]["value"]
        slack.send_envelope(
            "interactive",
            {
                "type": "block_actions", "user": {"id": "U1"}, "channel": {"id": "D100"},
                "container": {"message_ts": ts}, "actions": [{"value": pressed, "action_ts": "1.5"}],
            },
        )  # fmt: skip
        wait_answered(gateway, 2)
        assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: always"
        assert slack.messages[ts]["text"].endswith("→ always") and len(slack.messages[ts]["blocks"]) == 1


def test_markdown_becomes_mrkdwn_in_a_section_block(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin
) -> None:
    fake_llm.load([{"text": "**Done**: see [the docs](https://example.invalid/docs)"}])
    with Running(_settings(tmp_path, fake_llm.url, slack)) as gateway:
        slack.user_says("D100", "status?")
        wait_answered(gateway, 1)
        (message,) = slack.messages.values()
        (section,) = message["blocks"]
        assert section["text"] == {
            "type": "mrkdwn",
            "text": "*Done*: see <https://example.invalid/docs|the docs>",
        }


def test_messages_past_slacks_retries_are_read_back_from_the_history_and_threads_within_the_bounds(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin
) -> None:
    import time

    fake_llm.load([{"text": f"reply {i}"} for i in range(8)])
    settings = _settings(tmp_path, fake_llm.url, slack, backfill_hours=1, backfill_limit=2)
    with Running(settings) as gateway:
        hello = slack.user_says("D100", "hello", at=time.time() - 3 * 3600)["payload"]["event"]
        wait_answered(gateway, 1)
        slack.user_says("D100", "a question in a thread", thread_ts=hello["ts"])
        wait_answered(gateway, 2)
    # while no gateway ran, and past Slack's retries: one too old, three newer (the limit keeps two)
    slack.user_says("D100", "too old to answer", live=False, at=time.time() - 2 * 3600)
    for text in ("one", "two", "three"):
        slack.user_says("D100", text, live=False)
    slack.user_says("D100", "more in the thread", thread_ts=hello["ts"], live=False)
    slack.user_says("D200", "in a chat never seen", live=False)
    before = len(slack.calls)
    with Running(settings) as gateway:
        wait_answered(gateway, 5)
        reads = [(name, params) for name, params in slack.calls[before:] if name.startswith("conversations.")]
    assert sorted((name, params["channel"], params.get("ts")) for name, params in reads) == [
        ("conversations.history", "D100", None),
        ("conversations.replies", "D100", hello["ts"]),
    ], "only the chats the store knows, each thread by its replies"
    seen = [m["content"] for r in fake_llm.requests for m in r["messages"] if m["role"] == "user"]
    assert {"two", "three", "more in the thread"} <= set(seen)
    assert not {"one", "too old to answer", "in a chat never seen"} & set(seen)
    assert not any(s.startswith("reply ") for s in seen), "the bot's own messages are not answered"
    threaded = [m for m in slack.messages.values() if m["thread_ts"] == hello["ts"]]
    assert len(threaded) == 2, "the thread's missed message was answered in the thread"


def test_a_button_press_as_a_chats_last_message_does_not_stop_its_backfill(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin
) -> None:
    """A press is stored with the id `act<action_ts>`: the history is read back from that time."""
    import time

    fake_llm.load([{"text": "first"}, {"text": "caught up"}])
    settings = _settings(tmp_path, fake_llm.url, slack, backfill_hours=1, backfill_limit=5)
    with Running(settings) as gateway:
        slack.user_says("D100", "hello")
        wait_answered(gateway, 1, timeout=120)
        press = {"value": "q:gone:yes", "action_ts": f"{time.time():.6f}"}  # a question no longer open
        slack.send_envelope(
            "interactive",
            {"type": "block_actions", "user": {"id": "U1"}, "channel": {"id": "D100"}, "actions": [press]},
        )
        wait_answered(gateway, 2, timeout=120)
    slack.user_says("D100", "sent while no gateway ran", live=False)
    with Running(settings) as gateway:
        wait_answered(gateway, 3, timeout=120)
    assert fake_llm.requests[-1]["messages"][-1]["content"] == "sent while no gateway ran"
    assert len(fake_llm.requests) == 2
