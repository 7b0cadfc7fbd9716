"""The gateway on WeCom through an intelligent robot in API mode: the stand-in
(tests/standins/wecom_bot_standin.py) posts encrypted JSON callbacks to the gateway's listener and refreshes
each reply's stream as WeCom does; the scripted model behind the agent."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import Running, asking_registry, gateway_settings, wait_answered
from gateway_process import SCRIPT, gateway_profile, kill_9_while_replying, restarted, wait_all_answered
from ngircd import free_port
from standin_server import wait_listening
from wecom_bot_standin import BOT_ID, WeComBotStandin

from control_plane.gateway.wecom_bot import RESTARTED

USER = "ZhangSan"
GROUP = "wrkSFfCgAAtest"


@pytest.fixture
def robot() -> Iterator[WeComBotStandin]:
    server = WeComBotStandin()
    yield server
    server.close()


def _settings(tmp_path: Path, llm_url: str, robot: WeComBotStandin, **extra: Any) -> Any:
    config = robot.gateway_config(free_port(), [USER], edit_interval=0.05, **extra)
    return gateway_settings(tmp_path, llm_url, None, gateway={"wecom_bot": config})


def _contents(robot: WeComBotStandin, msgid: str) -> list[str]:
    return [answer["stream"]["content"] for answer in robot.answers(msgid)]


def test_a_direct_message_is_stored_before_the_200_and_answered_by_a_stream_that_grows(
    tmp_path: Path, fake_llm: Any, robot: WeComBotStandin
) -> None:
    reply = "**Hello** from the agent, " + "streamed word by word " * 6
    fake_llm.load([{"text": reply, "pace": 0.1}])
    with Running(_settings(tmp_path, fake_llm.url, robot)) as gateway:
        message = robot.says(USER, "hello robot")
        stored = gateway.store.last_inbound("wecom_bot")
        assert stored is not None and stored.message_id == message["msgid"], "stored before the 200"
        first = robot.answers(message["msgid"])[0]
        assert first["msgtype"] == "stream" and first["stream"]["id"] == message["msgid"]
        assert first["stream"]["finish"] is False
        final = robot.wait_for(lambda: robot.shown(message["msgid"]))
        assert final["stream"]["content"] == reply.strip(), "the stream takes Markdown as it is"
        contents = _contents(robot, message["msgid"])
        growing = [c for c in contents if c and c != reply.strip()]
        assert growing, f"refreshes showed the reply as it grew: {contents}"
        assert all(reply.startswith(c) for c in growing)
        wait_answered(gateway, 1)
        assert robot.posts == [] and robot.texts(USER) == [reply.strip()]


def test_a_group_mention_is_answered_in_the_group_without_the_mention(
    tmp_path: Path, fake_llm: Any, robot: WeComBotStandin
) -> None:
    fake_llm.load([{"text": "group answer"}, {"text": "second answer"}])
    settings = _settings(tmp_path, fake_llm.url, robot, allow_chats=[GROUP], name="Hermetic Bot")
    with Running(settings) as gateway:
        message = robot.says(USER, "@Hermetic Bot what is up?", group=GROUP)
        robot.wait_for(lambda: robot.shown(message["msgid"]))
        assert robot.texts(GROUP) == ["group answer"] and robot.texts(USER) == []
        assert fake_llm.requests[0]["messages"][-1]["content"] == "what is up?", "the mention is removed"
        # WeCom sends a group message only when it mentions the robot: one without it is answered as it is
        plain = robot.says(USER, "no mention here", group=GROUP)
        robot.wait_for(lambda: robot.shown(plain["msgid"]))
        assert fake_llm.requests[1]["messages"][-1]["content"] == "no mention here"
        wait_answered(gateway, 2)
        stored = gateway.store.last_inbound("wecom_bot", GROUP)
        assert stored is not None and stored.payload["direct"] is False and stored.payload["user"] == USER


def test_a_group_not_allowed_gets_its_stream_closed_empty_and_no_model_call(
    tmp_path: Path, fake_llm: Any, robot: WeComBotStandin
) -> None:
    with Running(_settings(tmp_path, fake_llm.url, robot)):
        message = robot.says(USER, "@Hermetic hello", group=GROUP)
        final = robot.wait_for(lambda: robot.shown(message["msgid"]))
        assert final["stream"] == {"id": message["msgid"], "finish": True, "content": ""}
        assert fake_llm.requests == []


def test_a_bad_signature_or_foreign_body_is_refused_and_nothing_is_stored(
    tmp_path: Path, fake_llm: Any, robot: WeComBotStandin
) -> None:
    fake_llm.load([{"text": "still here"}])
    with Running(_settings(tmp_path, fake_llm.url, robot)) as gateway:
        plain = json.dumps({"msgid": "m1", "aibotid": BOT_ID, "chattype": "single", "from": {"userid": USER},
                            "msgtype": "text", "text": {"content": "hi"}}).encode()  # fmt: skip
        wait_listening(int(robot.callback_url.split(":")[2].split("/")[0]))
        assert robot.post_callback(plain, token="not-the-token") == (403, "bad msg_signature")
        assert gateway.store.last_inbound("wecom_bot") is None and fake_llm.requests == []
        message = robot.says(USER, "are you still up?")  # the refusal left the gateway running
        assert robot.wait_for(lambda: robot.shown(message["msgid"]))["stream"]["content"] == "still here"


def test_a_retried_callback_gets_the_same_stream_and_is_answered_once(
    tmp_path: Path, fake_llm: Any, robot: WeComBotStandin
) -> None:
    fake_llm.load([{"text": "only once"}, {"text": "never"}])
    with Running(_settings(tmp_path, fake_llm.url, robot)) as gateway:
        message = robot.says(USER, "hello")
        again = robot.deliver(message)  # WeCom's retry of the same msgid
        assert again is not None and again["stream"]["id"] == message["msgid"]
        robot.wait_for(lambda: robot.shown(message["msgid"]))
        wait_answered(gateway, 1)
        assert len(fake_llm.requests) == 1 and robot.texts(USER) == ["only once"]


def test_an_approval_is_a_card_with_the_stream_and_a_press_answers_it_and_updates_the_card(
    tmp_path: Path, fake_llm: Any, robot: WeComBotStandin
) -> None:
    fake_llm.load([{"tool_calls": [{"name": "open_port", "arguments": {"port": 9000}}]}, {"text": "Opened."}])
    settings = _settings(tmp_path, fake_llm.url, robot).model_copy(update={"toolsets": ["files", "test"]})
    with Running(settings, asking_registry(timeout=300)) as gateway:
        message = robot.says(USER, "open 9000")
        with_card = robot.wait_for(
            lambda: [
                a for a in robot.answers(message["msgid"]) if a["msgtype"] == "stream_with_template_card"
            ]
        )
        card = with_card[0]["template_card"]
        assert card["card_type"] == "button_interaction"
        assert card["main_title"]["title"] == "Expose port 9000?"
        assert [b["text"] for b in card["button_list"]] == ["once", "always", "no"]
        update = robot.press(USER, card, card["button_list"][1]["key"])
        assert update is not None and update["response_type"] == "update_template_card"
        assert update["template_card"]["task_id"] == card["task_id"] and update["userids"] == [USER]
        assert "→ always" in update["template_card"]["sub_title_text"]
        final = robot.wait_for(lambda: robot.shown(message["msgid"]))
        assert final["stream"]["content"] == "Opened."
        wait_answered(gateway, 2)
        assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: always"


def test_an_image_the_user_sends_is_decrypted_into_uploads(
    tmp_path: Path, fake_llm: Any, robot: WeComBotStandin
) -> None:
    fake_llm.load([{"text": "got it"}])
    url = robot.serve_file(b"\xff\xd8\xff\xe0 a jpeg")
    with Running(_settings(tmp_path, fake_llm.url, robot)):
        message = robot.says(USER, body={"msgtype": "image", "image": {"url": url}})
        robot.wait_for(lambda: robot.shown(message["msgid"]))
        told = fake_llm.requests[0]["messages"][-1]["content"]
        assert "-image.jpg" in told and "11 bytes" in told


def test_a_kill_9_mid_reply_and_a_message_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, robot: WeComBotStandin
) -> None:
    """The killed run's stream is closed by the restarted gateway at WeCom's next refresh, with a note;
    the rerun's whole reply follows once through the message's response_url; the message sent while no
    gateway listened (its callback retried until answered 200) is answered once too."""
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    env = gateway_profile(tmp_path, fake_llm.url, "wecom_bot", robot.gateway_config(free_port(), [USER]))
    asked: list[dict[str, Any]] = []
    kill_9_while_replying(
        env,
        lambda: asked.append(robot.says(USER, "question one")),  # POSTed until stored: answered 200
        lambda: robot.wait_for(lambda: any("slow reply" in c for c in _contents(robot, asked[0]["msgid"]))),
    )
    later = threading.Thread(target=robot.says, args=(USER, "sent while the gateway was down"))
    later.start()
    with restarted(env) as again:
        robot.wait_for(lambda: {"answer one", "answer two"} <= set("\n".join(robot.texts(USER)).split("\n")))
        wait_all_answered(tmp_path, "wecom_bot")
    later.join(60)
    assert len(fake_llm.requests) == 3, f"the cut-off turn ran again once, the other once: {again.errors}"
    closed = robot.wait_for(lambda: robot.shown(asked[0]["msgid"]))
    assert closed["stream"]["content"] == RESTARTED, "the killed run's stream ends with the note"
    joined = "\n".join(robot.texts(USER))
    assert joined.count("answer one") == 1 and joined.count("answer two") == 1
    assert "slow reply" not in joined
    assert [
        p["markdown"]["content"]
        for p in robot.posts
        if "answer one" in p.get("markdown", {}).get("content", "")
    ], "the rerun's reply went out through a response_url"
