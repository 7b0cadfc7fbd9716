"""The gateway on Feishu / Lark: the lark-oapi SDK's long connection (ws.Client) and its REST client against
the stand-in (tests/standins/feishu_standin.py), the scripted model behind the agent; a kill -9 mid-turn
like test_gateway_crash.py's."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from feishu_standin import FeishuStandin, card_buttons, card_markdown
from gateway_harness import (
    Running,
    asking_registry,
    gateway_settings,
    store_fails_once,
    stored_in_order,
    wait_answered,
)
from gateway_process import SCRIPT, answered_once_after_restart, gateway_profile, kill_9_while_replying

from control_plane.config.chat import FeishuSettings
from control_plane.gateway import send_message
from control_plane.gateway.feishu import TEXT_LIMIT, FeishuAdapter, to_markdown

USER = "ou_7d8a6e6df7621556ce0d21922b676706"
"""An open id, as Feishu names a user to an app."""
CHAT = f"oc_p2p_{USER}"
"""The user's 1:1 chat with the bot, as the stand-in names it."""
GROUP = "oc_5ad11d72b830411d72b836c20"


@pytest.fixture
def fs() -> Iterator[FeishuStandin]:
    server = FeishuStandin()
    yield server
    server.close()


def _settings(tmp_path: Path, llm_url: str, fs: FeishuStandin, **more: Any) -> Any:
    return gateway_settings(tmp_path, llm_url, None, gateway={"feishu": fs.gateway_config([USER], **more)})


def test_a_message_is_answered_once_in_a_card_and_a_redelivered_event_is_not_answered_again(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    fake_llm.load([{"text": "**Done**\nline two"}, {"text": "second"}])
    with Running(_settings(tmp_path, fake_llm.url, fs)) as gateway:
        fs.wait_for(lambda: fs.connections)
        asked = fs.user_says(USER, "hello from feishu")
        assert fs.wait_answer(asked)["code"] == 200
        wait_answered(gateway, 1)
        (sent,) = fs.to(CHAT)
        assert sent["msg_type"] == "interactive" and sent["content"]["schema"] == "2.0"
        assert fs.texts(CHAT) == ["**Done**\nline two"]
        assert fake_llm.requests[0]["messages"][-1]["content"] == "hello from feishu"
        message_id = asked["event"]["message"]["message_id"]
        again = fs.user_says(USER, "hello from feishu", message_id=message_id)  # Feishu's re-push
        assert fs.wait_answer(again)["code"] == 200
        fs.user_says(USER, "and again")
        wait_answered(gateway, 2)
        assert fs.texts(CHAT)[1:] == ["second"] and len(fake_llm.requests) == 2


def test_an_event_is_answered_only_once_stored_and_a_malformed_one_without_stopping_anything(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    fake_llm.load([{"text": "ok"}, {"text": "after a new token"}])
    with Running(_settings(tmp_path, fake_llm.url, fs)) as gateway:
        fs.wait_for(lambda: fs.connections)
        sender = {"sender_type": "user", "sender_id": {"open_id": USER}}
        message = {"message_id": "om_bad", "chat_type": "p2p", "message_type": "text", "content": "{not JSON"}
        broken = fs.push("im.message.receive_v1", {"sender": sender, "message": message})
        assert fs.wait_answer(broken)["code"] == 200, "answered: pushing it again cannot help"
        failed = store_fails_once(gateway)
        message = fs.user_says(USER, "stored first")
        assert fs.wait_answer(message)["code"] == 500 and failed.is_set(), "not stored: to be pushed again"
        fs.redeliver()
        fs.wait_for(lambda: len(fs.responses[message["header"]["event_id"]]) == 2)
        assert fs.wait_answer(message)["code"] == 200
        wait_answered(gateway, 1)
        fs.expire_tokens()  # the cached token stops working: the send gets a new one and goes out
        fs.user_says(USER, "later")
        wait_answered(gateway, 2)
        assert fs.texts(CHAT) == ["ok", "after a new token"]


def test_a_chats_messages_pushed_at_once_are_stored_in_the_order_they_came(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    fake_llm.load([{"text": f"answer {i}"} for i in range(8)])
    with Running(_settings(tmp_path, fake_llm.url, fs)) as gateway:
        fs.wait_for(lambda: fs.connections)
        pushed = [fs.user_says(USER, f"message {i}") for i in range(8)]  # none waits for the last's answer
        for event in pushed:
            fs.wait_answer(event)
        assert stored_in_order(gateway) == [e["event"]["message"]["message_id"] for e in pushed]


def test_a_stranger_gets_a_pairing_code_a_command_needs_no_model_and_a_group_only_a_mention(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    fake_llm.load([{"text": "in the group"}])
    with Running(_settings(tmp_path, fake_llm.url, fs, allow_chats=[GROUP])) as gateway:
        fs.wait_for(lambda: fs.connections)
        fs.user_says("ou_stranger", "let me in")
        (told,) = fs.wait_for(lambda: fs.texts("oc_p2p_ou_stranger"))
        assert "hermetic gateway pair" in told
        fs.user_says(USER, "/help")
        wait_answered(gateway, 1)
        assert "/new" in fs.texts(CHAT)[0] and fake_llm.requests == []
        fs.wait_answer(fs.user_says(USER, "chatter", group=GROUP))  # answered, not taken
        fs.user_says(USER, "what is up?", group=GROUP, mention_bot=True)
        wait_answered(gateway, 2)
        assert fs.texts(GROUP) == ["in the group"]
        (request,) = fake_llm.requests
        assert request["messages"][-1]["content"] == "what is up?", "the bot's @mention taken out"
        fs.user_says(USER, "elsewhere", group="oc_not_listed", mention_bot=True)
        fs.user_says(USER, "still here", group=GROUP, mention_bot=True)
        wait_answered(gateway, 3)
        assert fs.to("oc_not_listed") == [], "a group not in allow_chats is never answered"


def test_a_reply_streams_by_editing_its_card_and_a_thread_is_answered_in_the_thread(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    words = "a reply written out word by word " * 4
    fake_llm.load([{"text": words, "pace": 0.2}, {"text": "in the thread"}])
    settings = _settings(tmp_path, fake_llm.url, fs, edit_interval=0.05, allow_chats=[GROUP])
    with Running(settings) as gateway:
        fs.wait_for(lambda: fs.connections)
        fs.user_says(USER, "stream it")
        wait_answered(gateway, 1)
        (card,) = fs.to(CHAT)
        assert card["patches"] >= 2, "shown while it grew, then finished by edits of one card"
        assert fs.texts(CHAT) == [words.strip()]
        fs.user_says(USER, "about the topic", group=GROUP, mention_bot=True, thread="om_root1")
        wait_answered(gateway, 2)
        (answer,) = fs.to(GROUP)
        assert answer["reply_to"] == "om_root1" and answer["in_thread"]
        assert fs.texts(GROUP) == ["in the thread"]


def test_a_long_reply_is_split_under_feishus_card_limit_without_breaking_a_code_block(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    code = "\n".join(f"x{i} = '<{i}>'" for i in range(1500))
    reply = "这里:\n```python\n" + code + "\n```\n" + " ".join(f"词{i}" for i in range(3000))
    fake_llm.load([{"text": reply}])
    with Running(_settings(tmp_path, fake_llm.url, fs)) as gateway:
        fs.wait_for(lambda: fs.connections)
        fs.user_says(USER, "a long one please")
        wait_answered(gateway, 1)
        parts = fs.texts(CHAT)  # each went through: the stand-in refuses a card body over 30 KB
        assert len(parts) >= 2 and all(FeishuAdapter.length(p) <= TEXT_LIMIT for p in parts)
        assert all(p.count("```") % 2 == 0 for p in parts), "each part's code block is closed"
        assert parts[1].startswith("```python"), "the block reopens with its language"
        words = [w for p in parts for w in p.split() if not w.startswith("```")]
        assert words == [w for w in reply.split() if not w.startswith("```")], "code keeps its < and >"


@pytest.mark.parametrize("where", ["1:1", "topic"])
def test_an_approval_is_a_card_whose_button_callback_answers_it_and_a_forged_one_is_refused(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin, where: str
) -> None:
    fake_llm.load([{"tool_calls": [{"name": "open_port", "arguments": {"port": 9000}}]}, {"text": "Opened."}])
    settings = _settings(tmp_path, fake_llm.url, fs, allow_chats=[GROUP])
    settings = settings.model_copy(update={"toolsets": ["files", "test"]})
    # the question waits longer than any wait below: a slow machine fails a wait, not the answer
    with Running(settings, asking_registry(timeout=300)) as gateway:
        fs.wait_for(lambda: fs.connections)
        if where == "topic":  # asked and answered in the topic's thread, whose session it is
            fs.user_says(USER, "open 9000", group=GROUP, mention_bot=True, thread="om_topic9")
        else:
            fs.user_says(USER, "open 9000")
        (asking,) = fs.wait_for(lambda: [i for i, m in fs.messages.items() if card_buttons(m["content"])])
        assert fs.messages[asking]["reply_to"] == ("om_topic9" if where == "topic" else None)
        buttons = card_buttons(fs.messages[asking]["content"])
        assert [b["text"]["content"] for b in buttons] == ["once", "always", "no"]
        data = [b["behaviors"][0]["value"]["data"] for b in buttons]
        forged = fs.press(asking, USER, {"data": data[0].replace("once", "always-forged")})
        assert fs.wait_answer(forged)["code"] == 200, "answered (else Feishu pushes it again), not taken"
        pressed = fs.press(asking, USER, {"data": data[1]})
        assert fs.wait_answer(pressed)["code"] == 200
        wait_answered(gateway, 2)
        assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: always"
        card = fs.wait_for(
            lambda: "→" in card_markdown(fs.messages[asking]["content"]) and fs.messages[asking]
        )
        assert card_buttons(card["content"]) == [] and card_markdown(card["content"]).endswith("→ always")


def test_a_press_that_comes_before_feishu_names_the_cards_message_is_taken(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    """Feishu can push a press over the long connection before its answer to the card's send (which names
    the card's message id) reaches the gateway: the press is taken by its data and chat, not refused."""
    fake_llm.load([{"tool_calls": [{"name": "open_port", "arguments": {"port": 9000}}]}, {"text": "Opened."}])
    settings = _settings(tmp_path, fake_llm.url, fs).model_copy(update={"toolsets": ["files", "test"]})
    fs.hold_cards = threading.Event()
    try:
        with Running(settings, asking_registry(timeout=300)) as gateway:
            fs.wait_for(lambda: fs.connections)
            fs.user_says(USER, "open 9000")
            (asking,) = fs.wait_for(lambda: [i for i, m in fs.messages.items() if card_buttons(m["content"])])
            data = [b["behaviors"][0]["value"]["data"] for b in card_buttons(fs.messages[asking]["content"])]
            pressed = fs.press(asking, USER, {"data": data[1]})  # the send's answer is still held
            assert fs.wait_answer(pressed)["code"] == 200
            fs.hold_cards.set()
            wait_answered(gateway, 2)
            assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: always"
    finally:
        fs.hold_cards.set()
        fs.hold_cards = None


def test_the_long_connection_pings_and_reconnects_after_the_socket_is_closed(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    fake_llm.load([{"text": "one"}, {"text": "two"}])
    with Running(_settings(tmp_path, fake_llm.url, fs)) as gateway:
        fs.wait_for(lambda: fs.connections)
        fs.wait_for(lambda: fs.pings)  # the SDK pings once connected
        fs.user_says(USER, "before")
        wait_answered(gateway, 1)
        fs.drop()  # the server closes the socket: the SDK asks for a new endpoint and connects again
        fs.wait_for(lambda: fs.connections >= 2)
        fs.user_says(USER, "after a close")
        wait_answered(gateway, 2)
        assert fs.texts(CHAT) == ["one", "two"]
        assert len(fs.called("POST", "/callback/ws/endpoint")) >= 2, "a new ticket each time"
    assert not [t for t in threading.enumerate() if t.name == "feishu-ws"], "the SDK's thread ended"
    fs.wait_for(lambda: fs.open_connections() == 0)  # its socket closed


def test_files_and_images_the_user_sends_land_in_the_sandbox_uploads(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    fake_llm.load([{"text": "got the file"}, {"text": "got the post"}])
    key = fs.upload("data.csv", b"a,b\n1,2\n")
    image = fs.upload("shot.png", b"\x89PNG\r\n\x1a\n")
    with Running(_settings(tmp_path, fake_llm.url, fs)) as gateway:
        fs.wait_for(lambda: fs.connections)
        content = json.dumps({"file_key": key, "file_name": "data.csv"})
        fs.user_says(USER, message={"message_type": "file", "content": content})
        wait_answered(gateway, 1)
        assert "uploads/data.csv" in fake_llm.requests[0]["messages"][-1]["content"]
        post = {
            "title": "Look",
            "content": [[{"tag": "text", "text": "at this "}, {"tag": "img", "image_key": image}]],
        }
        fs.user_says(USER, message={"message_type": "post", "content": json.dumps(post)})
        wait_answered(gateway, 2)
        told = fake_llm.requests[1]["messages"][-1]["content"]
        assert "Look" in told and "at this" in told and "uploads/image-1.png" in told


def test_files_the_agent_sends_are_uploaded_and_sent_as_file_and_image_messages(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    fake_llm.load([
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "out/r.txt", "content": "numbers\n"}}]},
        {"tool_calls": [{"name": "send_file", "arguments": {"path": "out/r.txt"}}]},
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "out/p.png", "content": "no png"}}]},
        {"tool_calls": [{"name": "send_file", "arguments": {"path": "out/p.png"}}]},
        {"text": "Sent."},
    ])  # fmt: skip
    with Running(_settings(tmp_path, fake_llm.url, fs)) as gateway:
        fs.wait_for(lambda: fs.connections)
        fs.user_says(USER, "a report please")
        wait_answered(gateway, 1)
        sent = {m["msg_type"]: m["content"] for m in fs.to(CHAT) if m["msg_type"] != "interactive"}
        assert fs.files[sent["file"]["file_key"]] == ("r.txt", b"numbers\n")
        assert fs.files[sent["image"]["image_key"]][1] == b"no png"
        assert fs.called("POST", "im/v1/files") == [{"file_type": "stream", "file_name": "r.txt"}]
        assert fs.called("POST", "im/v1/images") == [{"image_type": "message"}]


def test_a_kill_9_mid_turn_and_a_message_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    env = gateway_profile(tmp_path, fake_llm.url, "feishu", fs.gateway_config([USER]))
    kill_9_while_replying(
        env,
        lambda: fs.wait_for(lambda: fs.connections) and fs.user_says(USER, "question one"),
        lambda: fs.wait_for(lambda: any(m["patches"] for m in fs.to(CHAT))),  # the reply is out, growing
    )
    fs.user_says(USER, "sent while the gateway was down")  # not answered: pushed again on the next connection
    answered_once_after_restart(env, "feishu", lambda: fs.texts(CHAT), fs.wait_for, fake_llm)


def test_a_delivery_goes_to_a_chat_or_to_a_user_by_open_id(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    settings = _settings(tmp_path, fake_llm.url, fs)
    asyncio.run(send_message(settings, f"feishu:{GROUP}", "the nightly report"))
    asyncio.run(send_message(settings, f"feishu:{USER}", "yours"))
    assert fs.texts(GROUP) == ["the nightly report"] and fs.texts(CHAT) == ["yours"]


def test_a_wrong_app_secret_stops_the_platform_with_feishus_reason(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    settings = _settings(tmp_path, fake_llm.url, fs, app_secret="not-the-secret")
    with Running(settings) as gateway:
        status = gateway.status["feishu"]
        fs.wait_for(lambda: fs.called("POST", "auth/v3/tenant_access_token/internal"))
        deadline = time.monotonic() + 60
        while status.state != "stopped":
            assert time.monotonic() < deadline, status
            time.sleep(0.02)
        assert "app secret invalid" in " ".join(status.errors) and fs.connections == 0


def test_the_length_counted_is_at_least_the_bytes_the_text_takes_in_the_request() -> None:
    for text in ['a<b>"c\\d\n\te\r', "中文 <at id=all></at>", "x\x01y", "plain", "`<x>` and\n```\n<y>\n```"]:
        sent = json.dumps(json.dumps(to_markdown(text), ensure_ascii=False), ensure_ascii=False)
        assert len(sent.encode()) - 6 <= FeishuAdapter.length(text), text  # 6: the two pairs of quotes
    assert FeishuAdapter.length("中文") == 6


def test_markdown_keeps_code_and_quotes_and_cannot_open_the_cards_own_tags() -> None:
    text = "hi <at id=all></at> & <font color='red'>x</font>\n> quoted `<b>` kept\n```\n<raw>\n```"
    assert to_markdown(text) == (
        "hi &lt;at id=all&gt;&lt;/at&gt; & &lt;font color='red'&gt;x&lt;/font&gt;\n"
        "> quoted `<b>` kept\n```\n<raw>\n```"
    )


def test_the_domain_setting_names_feishu_or_lark_or_a_loopback_stand_in() -> None:
    def base(domain: str) -> str:
        return FeishuSettings(app_id="cli_x", app_secret="s", domain=domain).base_url  # type: ignore[arg-type]

    assert base("feishu") == "https://open.feishu.cn" and base("lark") == "https://open.larksuite.com"
    assert base("https://open.example.com/") == "https://open.example.com"
    assert base("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    for wrong in ("http://open.example.com", "larksuite", "https://open.feishu.cn/open-apis"):
        with pytest.raises(ValueError, match="domain"):
            base(wrong)
