"""The gateway on Mattermost: mattermostdriver's WebSocket and REST clients against the stand-in
(tests/standins/mattermost_standin.py), the scripted model behind the agent; a kill -9 mid-turn like
test_gateway_crash.py's."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import SEND_A_FILE, Running, asking_registry, gateway_settings, wait_answered
from gateway_process import SCRIPT, answered_once_after_restart, gateway_profile, kill_9_while_replying
from mattermost_standin import TOKEN, MattermostStandin

"""The agent writes out/r.txt and sends it to the chat."""


@pytest.fixture
def mm() -> Iterator[MattermostStandin]:
    server = MattermostStandin()
    yield server
    server.close()


def _config(mm: MattermostStandin, **extra: Any) -> dict[str, Any]:
    return {"url": mm.url, "token": TOKEN, "allow_users": ["u1"], "actions_port": 0} | extra


def _settings(tmp_path: Path, llm_url: str, mm: MattermostStandin, **extra: Any) -> Any:
    config = _config(mm, edit_interval=0.05) | extra
    return gateway_settings(tmp_path, llm_url, None, gateway={"mattermost": config})


def test_a_direct_message_is_answered_by_patching_one_post_in_markdown_and_a_429_is_waited_out(
    tmp_path: Path, fake_llm: Any, mm: MattermostStandin
) -> None:
    reply = "**Done**: " + " ".join(f"piece{i}" for i in range(60))
    fake_llm.load([{"text": reply, "pace": 0.01}])
    with Running(_settings(tmp_path, fake_llm.url, mm)) as gateway:
        mm.wait_for(mm.connected)
        mm.limit_patches(1)
        mm.user_says("d100", "hello from mattermost")
        wait_answered(gateway, 1)
        assert mm.texts("d100") == [reply], "Mattermost renders the model's Markdown as it is"
        assert len(mm.called("POST", "/posts")) == 1 and len(mm.called("PUT", "/posts/")) >= 2
        sessions = [s for s in gateway.agent.store.list_sessions("default") if s.source == "mattermost"]
        assert len(sessions) == 1


def test_a_stranger_gets_a_pairing_code_and_a_channel_post_is_answered_only_when_it_mentions_the_bot(
    tmp_path: Path, fake_llm: Any, mm: MattermostStandin
) -> None:
    fake_llm.load([{"text": "in the thread"}])
    with Running(_settings(tmp_path, fake_llm.url, mm, allow_chats=["town"])) as gateway:
        mm.wait_for(mm.connected)
        mm.user_says("d200", "let me in", user="u999")
        (told,) = mm.wait_for(lambda: mm.texts("d200"))
        assert "hermetic gateway pair" in told
        mm.user_says("town", "chatter among people")
        mm.user_says("town", "@hermetic-ci rerun the build, and cc email@hermetic.dev")  # other names
        asked = mm.user_says("town", "@hermetic what is up?")
        wait_answered(gateway, 1)
        (answer,) = mm.bot_posts("town")
        assert answer["message"] == "in the thread" and answer["root_id"] == ""
        (request,) = fake_llm.requests
        assert request["messages"][-1]["content"] == "what is up?", "the mention is taken out"
        assert asked["id"] != answer["id"]


def test_a_long_reply_is_split_at_the_post_limit(
    tmp_path: Path, fake_llm: Any, mm: MattermostStandin
) -> None:
    reply = " ".join(f"word{i}" for i in range(3000))  # 25,889 characters
    fake_llm.load([{"text": reply}])
    with Running(_settings(tmp_path, fake_llm.url, mm)) as gateway:
        mm.wait_for(mm.connected)
        mm.user_says("d100", "a long one please")
        wait_answered(gateway, 1)
        parts = mm.texts("d100")
        assert len(parts) == 2 and all(len(p) <= 16383 for p in parts)
        assert " ".join(parts).split() == reply.split()


def test_an_approval_is_a_row_of_buttons_and_a_press_answers_it_and_a_forged_one_is_refused(
    tmp_path: Path, fake_llm: Any, mm: MattermostStandin
) -> None:
    fake_llm.load(
        [
            {"tool_calls": [{"name": "open_port", "arguments": {"port": 9000}}]},
            {"text": "Opened."},
            {"text": "Later."},
        ]
    )
    settings = _settings(tmp_path, fake_llm.url, mm).model_copy(update={"toolsets": ["files", "test"]})
    # the question waits longer than any wait below: a slow machine fails a wait, not the answer
    with Running(settings, asking_registry(timeout=300)) as gateway:
        mm.wait_for(mm.connected)
        mm.user_says("d100", "open 9000")

        def asked() -> dict[str, Any] | None:
            return next((p for p in mm.bot_posts("d100") if p["props"].get("attachments")), None)

        post = mm.wait_for(asked)
        (attachment,) = post["props"]["attachments"]
        assert [a["name"] for a in attachment["actions"]] == ["once", "always", "no"]
        forged = dict(attachment["actions"][0]["integration"])
        data = forged["context"]["data"].replace("once", "always")
        body = {
            "user_id": "u1",
            "channel_id": "d100",
            "post_id": post["id"],
            "context": {"data": data, "sig": "0" * 64},
        }
        request = urllib.request.Request(
            forged["url"], json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)  # noqa: S310 (loopback)
        assert refused.value.code == 403
        assert mm.press(post["id"], "always") == 200
        wait_answered(gateway, 2)
        assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: always"
        answered = mm.posts[post["id"]]
        assert answered["message"].endswith("→ always") and answered["props"]["attachments"] == []
    mm.user_says("d100", "sent after the press, while no gateway ran", live=False)
    with Running(settings, asking_registry(timeout=300)) as gateway:  # the press is the chat's last record
        wait_answered(gateway, 3)
    assert fake_llm.requests[2]["messages"][-1]["content"] == "sent after the press, while no gateway ran"


def test_a_file_the_user_posts_lands_in_the_sandbox_uploads(
    tmp_path: Path, fake_llm: Any, mm: MattermostStandin
) -> None:
    fake_llm.load([{"text": "got it"}])
    with Running(_settings(tmp_path, fake_llm.url, mm)) as gateway:
        mm.wait_for(mm.connected)
        post = mm.user_says("d100", "here is the data", file=("data.csv", b"a,b\n1,2\n"))
        wait_answered(gateway, 1)
        assert mm.called("GET", f"/files/{post['file_ids'][0]}")
        told = fake_llm.requests[0]["messages"][-1]["content"]
        assert "uploads/data.csv" in told


def test_a_kill_9_mid_turn_and_a_post_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, mm: MattermostStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    env = gateway_profile(tmp_path, fake_llm.url, "mattermost", _config(mm))
    kill_9_while_replying(
        env,
        lambda: mm.wait_for(mm.connected) and mm.user_says("d100", "question one"),
        lambda: mm.wait_for(lambda: mm.called("PUT", "/posts/")),
    )
    mm.user_says("d100", "sent while the gateway was down", live=False)
    answered_once_after_restart(env, "mattermost", lambda: mm.texts("d100"), mm.wait_for, fake_llm)
    assert mm.called("GET", "/channels/d100/posts"), "the missed post came from the channel's history"


def test_a_file_the_agent_sends_is_uploaded_and_posted(
    tmp_path: Path, fake_llm: Any, mm: MattermostStandin
) -> None:
    fake_llm.load(SEND_A_FILE)
    with Running(_settings(tmp_path, fake_llm.url, mm)) as gateway:
        mm.wait_for(mm.connected)
        mm.user_says("d100", "a report please")
        wait_answered(gateway, 1)
        (posted,) = [p for p in mm.bot_posts("d100") if p["file_ids"]]
        assert mm.files[posted["file_ids"][0]] == ("r.txt", b"numbers\n")


COMMAND_TOKEN = "mm-command-token"
"""The token Mattermost shows for a custom slash command (one per command)."""


def _commands_url(gateway: Any) -> str:
    adapter = gateway.adapters["mattermost"]
    deadline = time.monotonic() + 30
    while adapter.actions_port in (None, 0):
        assert time.monotonic() < deadline, "the listener never listened"
        time.sleep(0.02)
    return f"http://127.0.0.1:{adapter.actions_port}/commands"


def test_slash_commands_are_taken_from_custom_slash_command_requests_and_a_bad_token_is_401(
    tmp_path: Path, fake_llm: Any, mm: MattermostStandin
) -> None:
    """The Mattermost client keeps `/new`, `/stop`... for itself: they reach the bot as custom slash
    commands, each registered under its own trigger or all under one (`/hermetic stop`)."""
    fake_llm.load([{"text": " ".join(f"w{i}" for i in range(400)), "pace": 0.05}])
    tokens = [COMMAND_TOKEN, "mm-hermetic-command-token"]
    with Running(_settings(tmp_path, fake_llm.url, mm, command_tokens=tokens)) as gateway:
        mm.wait_for(mm.connected)
        url = _commands_url(gateway)
        status, _ = mm.slash(url, "a-forged-token", "d100", "/status")
        assert status == 401 and gateway.store.last_inbound("mattermost") is None
        nothing_shown = {"response_type": "ephemeral", "text": ""}
        assert mm.slash(url, COMMAND_TOKEN, "d100", "/help") == (200, nothing_shown)
        (helped,) = mm.wait_for(lambda: mm.texts("d100"))
        assert "/new" in helped and "/stop" in helped and fake_llm.requests == []
        mm.user_says("d100", "tell me a long story")
        mm.wait_for(lambda: len(mm.texts("d100")) == 2 and mm.called("PUT", "/posts/"))
        assert mm.slash(url, tokens[1], "d100", "/hermetic", "stop")[0] == 200
        mm.wait_for(lambda: "Stopping." in mm.texts("d100"))
        wait_answered(gateway, 3)
        assert len(fake_llm.requests) == 1, "the commands never reached the model"
        assert mm.slash(url, tokens[1], "d100", "/hermetic", "what is up?") == (
            200, {"response_type": "ephemeral", "text": "Not a command I know. Try /hermetic help."}
        )  # fmt: skip
        status, told = mm.slash(url, COMMAND_TOKEN, "dx7", "/status")  # a direct chat between two people
        assert status == 200 and "your direct chat with @hermetic" in told["text"]
        assert not mm.texts("dx7")


def test_a_slash_command_in_a_channel_obeys_allow_chats_and_a_backfill_resumes_after_it(
    tmp_path: Path, fake_llm: Any, mm: MattermostStandin
) -> None:
    fake_llm.load([{"text": "answered after the restart"}])
    settings = _settings(tmp_path, fake_llm.url, mm, allow_chats=["town"], command_tokens=[COMMAND_TOKEN])
    with Running(settings) as gateway:
        mm.wait_for(mm.connected)
        url = _commands_url(gateway)
        assert mm.slash(url, COMMAND_TOKEN, "elsewhere", "/status")[0] == 200
        assert mm.slash(url, COMMAND_TOKEN, "town", "/status")[0] == 200
        (status,) = mm.wait_for(lambda: mm.texts("town"))
        assert status.startswith("session ") and not mm.texts("elsewhere")
    mm.user_says("town", "@hermetic sent while no gateway ran", live=False)
    with Running(settings) as gateway:  # the command is the channel's last record: no post to start from
        wait_answered(gateway, 2)
    assert fake_llm.requests[0]["messages"][-1]["content"] == "sent while no gateway ran"
