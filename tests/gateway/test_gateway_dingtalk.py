"""The gateway on DingTalk: the dingtalk-stream SDK in Stream mode and the adapter's OpenAPI calls against
the stand-in (tests/standins/dingtalk_standin.py), the scripted model behind the agent; a kill -9 mid-turn
like test_gateway_crash.py's."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dingtalk_standin import DingTalkStandin
from gateway_harness import (
    SEND_A_FILE,
    Running,
    asking_registry,
    gateway_settings,
    store_fails_once,
    stored_in_order,
    wait_answered,
)
from gateway_process import SCRIPT, answered_once_after_restart, gateway_profile, kill_9_while_replying

from control_plane.gateway.dingtalk import TEXT_LIMIT, DingTalkAdapter, to_markdown

USER = "manager4220"
"""A staff id, as DingTalk names a user of the organisation."""
GROUP = "cidp2TSoYhb5bAlhBOJ4N3mSg=="


@pytest.fixture
def dt() -> Iterator[DingTalkStandin]:
    server = DingTalkStandin()
    yield server
    server.close()


def _settings(tmp_path: Path, llm_url: str, dt: DingTalkStandin, **more: Any) -> Any:
    return gateway_settings(tmp_path, llm_url, None, gateway={"dingtalk": dt.gateway_config([USER], **more)})


def _texts(dt: DingTalkStandin, chat: str) -> list[str]:
    """The replies' text as the model wrote it (DingTalk's hard line breaks taken off)."""
    return [text.replace("  \n", "\n").rstrip() for text in dt.texts(chat)]


def test_a_message_is_answered_once_in_markdown_and_a_redelivered_msg_id_is_not_answered_again(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    fake_llm.load([{"text": "**Done**\nline two ~~gone~~"}, {"text": "second"}])
    with Running(_settings(tmp_path, fake_llm.url, dt)) as gateway:
        dt.wait_for(lambda: dt.connections)
        opened = dt.called("/v1.0/gateway/connections/open")[0]
        assert opened["subscriptions"] == [
            {"type": "CALLBACK", "topic": "/v1.0/im/bot/messages/get"},
            {"type": "CALLBACK", "topic": "/v1.0/card/instances/callback"},
        ]
        asked = dt.user_says(USER, "hello from dingtalk")
        wait_answered(gateway, 1)
        (sent,) = dt.messages_to(USER)
        assert sent["msgKey"] == "sampleMarkdown"
        assert sent["msgParam"] == {"title": "Done", "text": "**Done**  \nline two gone  "}
        again = dt.user_says(USER, "hello from dingtalk", msg_id=asked["msgId"])  # DingTalk's redelivery
        assert dt.wait_acked(again)["code"] == 200
        dt.user_says(USER, "and again")
        wait_answered(gateway, 2)
        assert _texts(dt, USER)[1:] == ["second"] and len(fake_llm.requests) == 2


def test_a_frame_is_acked_only_once_stored_and_a_malformed_one_is_refused_without_stopping_anything(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    fake_llm.load([{"text": "ok"}, {"text": "after a new token"}])
    with Running(_settings(tmp_path, fake_llm.url, dt)) as gateway:
        dt.wait_for(lambda: dt.connections)
        broken = dt.push("/v1.0/im/bot/messages/get", {"msgId": "m-bad", "msgtype": "text"})  # no "text"
        assert dt.wait_ack(broken)["code"] == 400, "ACKed as a bad request: pushing it again cannot help"
        failed = store_fails_once(gateway)
        message = dt.user_says(USER, "stored first")
        assert failed.wait(60)
        dt.redeliver()  # DingTalk pushes a frame that got no ACK again
        ack = dt.wait_acked(message)
        assert ack["code"] == 200 and len(dt.acks[ack["headers"]["messageId"]]) == 1, "none for the failure"
        wait_answered(gateway, 1)
        assert gateway.store.last_inbound("dingtalk") is not None
        dt.expire_tokens()  # the cached token stops working: the send gets a new one and goes out
        dt.user_says(USER, "later")
        wait_answered(gateway, 2)
        assert _texts(dt, USER) == ["ok", "after a new token"]


def test_a_chats_messages_pushed_at_once_are_stored_in_the_order_they_came(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    fake_llm.load([{"text": f"answer {i}"} for i in range(8)])
    with Running(_settings(tmp_path, fake_llm.url, dt)) as gateway:
        dt.wait_for(lambda: dt.connections)
        pushed = [dt.user_says(USER, f"message {i}") for i in range(8)]  # none waits for the last's ACK
        for message in pushed:
            dt.wait_acked(message)
        assert stored_in_order(gateway) == [m["msgId"] for m in pushed]


def test_a_stranger_gets_a_pairing_code_and_a_group_is_answered_only_when_the_robot_is_mentioned(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    fake_llm.load([{"text": "in the group"}])
    with Running(_settings(tmp_path, fake_llm.url, dt, allow_chats=[GROUP])) as gateway:
        dt.wait_for(lambda: dt.connections)
        dt.user_says("stranger1", "let me in")
        (told,) = dt.wait_for(lambda: dt.texts("stranger1"))
        assert "hermetic gateway pair" in told
        dt.wait_acked(dt.user_says(USER, "chatter", group=GROUP))  # ACKed, not taken
        dt.user_says(USER, " what is up?", group=GROUP, at_bot=True)
        wait_answered(gateway, 1)
        assert _texts(dt, GROUP) == ["in the group"]
        sent = dt.called("/v1.0/robot/groupMessages/send")
        assert sent[0]["openConversationId"] == GROUP and sent[0]["robotCode"] == "dingtest0appkey"
        (request,) = fake_llm.requests
        assert request["messages"][-1]["content"] == "what is up?"


def test_a_long_reply_is_split_at_the_limit_without_breaking_a_code_block(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    code = "\n".join(f"x{i} = {i}" for i in range(600))
    reply = "Here:\n```python\n" + code + "\n```\n" + " ".join(f"word{i}" for i in range(600))
    fake_llm.load([{"text": reply}])
    with Running(_settings(tmp_path, fake_llm.url, dt)) as gateway:
        dt.wait_for(lambda: dt.connections)
        dt.user_says(USER, "a long one please")
        wait_answered(gateway, 1)
        parts = dt.texts(USER)
        assert len(parts) >= 2 and all(len(p.encode()) <= TEXT_LIMIT for p in parts)
        assert all(p.count("```") % 2 == 0 for p in parts), "each part's code block is closed"
        assert parts[1].startswith("```python"), "the block reopens with its language"
        words = [w for p in _texts(dt, USER) for w in p.split() if not w.startswith("```")]
        assert words == [w for w in reply.split() if not w.startswith("```")]


def test_an_approval_is_a_card_whose_button_callback_answers_it_and_a_forged_one_is_refused(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    fake_llm.load([{"tool_calls": [{"name": "open_port", "arguments": {"port": 9000}}]}, {"text": "Opened."}])
    settings = _settings(tmp_path, fake_llm.url, dt, card_template_id="tpl.schema")
    settings = settings.model_copy(update={"toolsets": ["files", "test"]})
    # the question waits longer than any wait below: a slow machine fails a wait, not the answer
    with Running(settings, asking_registry(timeout=300)) as gateway:
        dt.wait_for(lambda: dt.connections)
        dt.user_says(USER, "open 9000")
        ((track, card),) = dt.wait_for(lambda: list(dt.cards.items()))
        assert card["callbackType"] == "STREAM" and card["openSpaceId"] == f"dtv1.card//IM_ROBOT.{USER}"
        params = card["cardData"]["cardParamMap"]
        buttons = json.loads(params["buttons"])
        assert [b["label"] for b in buttons] == ["once", "always", "no"]
        forged = dt.press(track, USER, buttons[0]["data"].replace("once", "always-forged"))
        assert dt.wait_ack(forged)["code"] == 200, "ACKed (DingTalk would push it again) but not taken"
        dt.press(track, USER, buttons[1]["data"])
        wait_answered(gateway, 2)
        assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: always"
        updated = dt.wait_for(lambda: "→" in dt.cards[track]["cardData"]["cardParamMap"]["markdown"]
                              and dt.cards[track])  # fmt: skip
        assert json.loads(updated["cardData"]["cardParamMap"]["buttons"]) == []
        assert updated["cardData"]["cardParamMap"]["markdown"].rstrip().endswith("→ always")


def test_the_stream_reconnects_after_a_disconnect_and_after_the_socket_is_closed(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    fake_llm.load([{"text": "one"}, {"text": "two"}, {"text": "three"}])
    with Running(_settings(tmp_path, fake_llm.url, dt)) as gateway:
        dt.wait_for(lambda: dt.connections)
        ping = dt.push("ping", {"opaque": "p-1"}, kind="SYSTEM")
        assert dt.wait_ack(ping)["data"] == '{"opaque": "p-1"}', "a ping is answered with its data"
        dt.user_says(USER, "before")
        wait_answered(gateway, 1)
        dt.drop(announced=True)  # SYSTEM disconnect: the SDK closes and connects anew
        dt.wait_for(lambda: dt.connections >= 2)
        dt.user_says(USER, "after a disconnect")
        wait_answered(gateway, 2)
        dt.drop(announced=False)  # the server closes the socket
        dt.wait_for(lambda: dt.connections >= 3)
        dt.user_says(USER, "after a close")
        wait_answered(gateway, 3)
        assert _texts(dt, USER) == ["one", "two", "three"]
        assert len(dt.called("/v1.0/gateway/connections/open")) >= 3, "a new ticket each time"


def test_a_file_the_user_sends_lands_in_the_sandbox_uploads(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    fake_llm.load([{"text": "got it"}])
    code = dt.upload("data.csv", b"a,b\n1,2\n")
    with Running(_settings(tmp_path, fake_llm.url, dt)) as gateway:
        dt.wait_for(lambda: dt.connections)
        file = {"downloadCode": code, "fileName": "data.csv"}
        dt.user_says(USER, message={"msgtype": "file", "content": file})
        wait_answered(gateway, 1)
        (asked,) = dt.called("/v1.0/robot/messageFiles/download")
        assert asked == {"downloadCode": code, "robotCode": "dingtest0appkey"}
        assert "uploads/data.csv" in fake_llm.requests[0]["messages"][-1]["content"]


def test_a_file_over_max_file_bytes_is_refused_while_it_downloads_not_read_whole(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    fake_llm.load([{"text": "no file then"}])
    size = 64 * 1024 * 1024
    code = dt.upload_large("dump.bin", size)  # streamed with no Content-Length: only reading tells its size
    with Running(_settings(tmp_path, fake_llm.url, dt, max_file_bytes=100_000)) as gateway:
        dt.wait_for(lambda: dt.connections)
        dt.user_says(
            USER, message={"msgtype": "file", "content": {"downloadCode": code, "fileName": "dump.bin"}}
        )
        wait_answered(gateway, 1)
        assert any(t.startswith("I could not take your file dump.bin") for t in dt.texts(USER))
    assert dt.streamed[code] < size // 2, "the download stopped at the cap, not at the end of the file"


def test_a_file_the_agent_sends_is_uploaded_as_media_and_sent_as_a_file_message(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    fake_llm.load(SEND_A_FILE)
    with Running(_settings(tmp_path, fake_llm.url, dt)) as gateway:
        dt.wait_for(lambda: dt.connections)
        dt.user_says(USER, "a report please")
        wait_answered(gateway, 1)
        (sent,) = [m for m in dt.messages_to(USER) if m["msgKey"] == "sampleFile"]
        assert sent["msgParam"]["fileName"] == "r.txt" and sent["msgParam"]["fileType"] == "txt"
        assert dt.files[sent["msgParam"]["mediaId"]] == ("r.txt", b"numbers\n")


def test_a_kill_9_mid_turn_and_a_message_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    # robot messages cannot be edited, so a reply goes out whole when done: the kill lands while a tool
    # still runs (as in the WhatsApp test, whose notes give the 30 s)
    slow = {"tool_calls": [{"name": "terminal", "arguments": {"command": "sleep 30"}}]}
    fake_llm.load([slow, *SCRIPT[1:]])
    env = gateway_profile(tmp_path, fake_llm.url, "dingtalk", dt.gateway_config([USER]))
    kill_9_while_replying(
        env,
        lambda: dt.wait_for(lambda: dt.connections) and dt.user_says(USER, "question one"),
        lambda: fake_llm.wait_requests(1),
    )
    dt.user_says(USER, "sent while the gateway was down")  # not ACKed: pushed again on the next connection
    answered_once_after_restart(env, "dingtalk", lambda: _texts(dt, USER), dt.wait_for, fake_llm)


def test_markdown_keeps_code_blocks_and_counts_the_bytes_dingtalk_gets() -> None:
    assert to_markdown("a\nb\n```\nx\ny\n```") == "a  \nb  \n```\nx\ny\n```"
    assert DingTalkAdapter.length("中文") == len("中文  ".encode())


def test_a_wrong_client_secret_stops_the_platform_with_dingtalks_reason(
    tmp_path: Path, fake_llm: Any, dt: DingTalkStandin
) -> None:
    settings = _settings(tmp_path, fake_llm.url, dt, client_secret="not-the-secret")
    with Running(settings) as gateway:
        status = gateway.status["dingtalk"]
        dt.wait_for(lambda: dt.called("/v1.0/oauth2/accessToken"))
        deadline = time.monotonic() + 60
        while status.state != "stopped":
            assert time.monotonic() < deadline, status
            time.sleep(0.02)
        assert "invalidClientIdOrSecret" in " ".join(status.errors) and dt.connections == 0
