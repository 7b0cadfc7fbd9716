"""The gateway on Slack: slack_sdk's Socket Mode client and Web API client against the stand-in
(tests/standins/slack_standin.py), the scripted model behind the agent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
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


def _uploaded(gateway: Any, name: str, into: Path) -> bytes:
    """The bytes of uploads/`name` in the Slack session's sandbox."""
    (session,) = [s for s in gateway.agent.store.list_sessions("default") if s.source == "slack"]
    return gateway.agent.sandboxes.get(session.id).download(f"uploads/{name}", into).read_bytes()


def _told(fake_llm: Any) -> str:
    (request,) = fake_llm.requests
    return str(request["messages"][-1]["content"])


@pytest.mark.parametrize("check_file_info", [False, True], ids=["file-object", "check-file-info"])
def test_a_shared_file_lands_in_uploads_with_its_bytes_and_the_text_is_answered_once(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin, check_file_info: bool
) -> None:
    data = bytes(range(256)) * 40
    fake_llm.load([{"text": "got your table"}])
    with Running(_settings(tmp_path, fake_llm.url, slack)) as gateway:
        slack.user_says("D100", "the table", file=("../q3 table.bin", data), check_file_info=check_file_info)
        wait_answered(gateway, 1)
        assert len(slack.downloads) == 1, "fetched with the bot token (the stand-in serves nothing else)"
        assert bool(slack.called("files.info")) == check_file_info
        name = "F00000001" if check_file_info else "q3_table.bin"  # only the id: its name is not known
        assert _uploaded(gateway, name, tmp_path / "out") == data
        told = _told(fake_llm)
        assert "the table" in told and f"uploads/{name} (10,240 bytes)" in told
        assert slack.texts("D100") == ["got your table"]


def test_a_file_over_the_cap_is_not_downloaded_and_the_user_is_told(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin
) -> None:
    fake_llm.load([{"text": "answered the words"}])
    with Running(_settings(tmp_path, fake_llm.url, slack, max_file_bytes=1000)) as gateway:
        slack.user_says("D100", "and a big one", file=("big.bin", b"x" * 1001))
        wait_answered(gateway, 1)
        assert slack.downloads == []
        refusal, reply = slack.texts("D100")
        assert refusal == (
            "I could not take your file big.bin: big.bin is larger than the 1,000 bytes this gateway takes"
        )
        assert reply == "answered the words"
        assert "and a big one" in _told(fake_llm) and "big.bin, that could not be taken" in _told(fake_llm)


def test_a_download_slack_refuses_tells_the_user_and_the_text_is_still_answered(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin
) -> None:
    """Without files:read Slack sends the bot to its sign-in page: the redirect is not followed."""
    fake_llm.load([{"text": "the text part"}])
    shared = slack.add_file("notes.txt", b"secret notes\n")
    anonymous = requests.get(shared["url_private_download"], allow_redirects=False, timeout=10)
    assert anonymous.status_code == 302 and "/signin" in anonymous.headers["Location"]
    slack.files_read = False
    with Running(_settings(tmp_path, fake_llm.url, slack)) as gateway:
        slack.user_says("D100", "read these", file=("notes.txt", b"secret notes\n"))
        wait_answered(gateway, 1)
        refusal, reply = slack.texts("D100")
        assert refusal.startswith("I could not take your file notes.txt: ") and "302" in refusal
        assert reply == "the text part" and "read these" in _told(fake_llm)
        assert slack.downloads == []


def test_a_file_address_off_slacks_hosts_gets_no_token(
    tmp_path: Path, fake_llm: Any, slack: SlackStandin
) -> None:
    """The event names where to download from; anywhere but Slack's hosts is refused before a request."""
    import http.server
    import threading

    asked: list[str] = []

    class Elsewhere(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.end_headers()

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    fake_llm.load([{"text": "words answered"}])
    try:
        with Running(_settings(tmp_path, fake_llm.url, slack)) as gateway:
            envelope = slack.user_says("D100", "here", file=("a.txt", b"a"), live=False)
            envelope["files"][0]["url_private_download"] = f"http://127.0.0.1:{other.server_port}/a.txt"
            slack.send_envelope("events_api", {"type": "event_callback", "event": envelope})
            wait_answered(gateway, 1)
            refusal, reply = slack.texts("D100")
            assert "the file's address is not Slack's" in refusal and reply == "words answered"
    finally:
        other.shutdown()
    assert asked == []
