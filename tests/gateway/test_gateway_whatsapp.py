"""The gateway on WhatsApp: pywa against the Cloud API stand-in (tests/standins/whatsapp_standin.py), the
stand-in posting signed webhooks to the gateway's listener, the scripted model behind the agent; a kill -9
mid-turn like test_gateway_crash.py's."""

from __future__ import annotations

import hashlib
import hmac
import json
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import SEND_A_FILE, Running, asking_registry, gateway_settings, wait_answered
from gateway_process import (
    SCRIPT,
    answered_once_after_restart,
    gateway_profile,
    kill_9_while_replying,
    start_gateway,
    wait_all_answered,
)
from whatsapp_standin import NUMBER, VERIFY_TOKEN, WhatsAppStandin

from control_plane.gateway import gateway as gateway_module
from control_plane.gateway.base import Inbound
from control_plane.gateway.records import GatewayStore

USER = "US.13491208655302741918"
"""A business-scoped user id (BSUID), as the Cloud API names users."""


@pytest.fixture
def wa() -> Iterator[WhatsAppStandin]:
    server = WhatsAppStandin()
    yield server
    server.close()


def _config(wa: WhatsAppStandin) -> dict[str, Any]:
    return wa.gateway_config([USER])


def _settings(tmp_path: Path, llm_url: str, wa: WhatsAppStandin) -> Any:
    return gateway_settings(tmp_path, llm_url, None, gateway={"whatsapp": _config(wa)})


def test_a_message_is_answered_once_in_whatsapps_formatting_after_a_typing_indicator(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    fake_llm.load([{"text": "**Done**, ~~not~~ *really*", "pace": 0.01}, {"text": "second"}])
    with Running(_settings(tmp_path, fake_llm.url, wa)) as gateway:
        asked = wa.user_says(USER, "hello from whatsapp")
        assert gateway.store.last_inbound("whatsapp") is not None, "stored before the webhook's 200"
        wait_answered(gateway, 1)
        assert wa.texts(USER) == ["*Done*, ~not~ _really_"]
        typing = [m for m in wa.sent if m.get("status") == "read"]
        assert typing and typing[0]["message_id"] == asked["id"] and typing[0]["typing_indicator"]
        wa.deliver(USER, asked)  # a redelivery: answered 200, not answered again
        wa.user_says(USER, "and again")
        wait_answered(gateway, 2)
        assert wa.texts(USER)[1:] == ["second"] and len(fake_llm.requests) == 2


def test_the_typing_indicator_is_shown_again_while_a_long_reply_is_written(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WhatsApp drops a typing indicator after 25 s; a reply that takes longer shows it again."""
    monkeypatch.setattr(gateway_module, "TYPING_RENEWAL", 0.2)
    fake_llm.load([{"text": "thought long", "delay": 1.5}])
    with Running(_settings(tmp_path, fake_llm.url, wa)) as gateway:
        asked = wa.user_says(USER, "think hard")
        wait_answered(gateway, 1)
        shown = [m for m in wa.sent if m.get("status") == "read"]
        assert len(shown) >= 3 and {m["message_id"] for m in shown} == {asked["id"]}
        count = len(shown)
    assert len([m for m in wa.sent if m.get("status") == "read"]) == count, "none after the reply"


def test_a_chats_messages_are_answered_in_the_order_they_came_while_storing_one_is_slow(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    """Meta may POST a user's webhooks at once; the store runs in a worker thread, so while the first
    message's write is slow (held here) the second waits its turn instead of being answered first."""
    fake_llm.load([{"text": "one"}, {"text": "two"}])
    with Running(_settings(tmp_path, fake_llm.url, wa)) as gateway:
        real, writing, release = gateway.store.receive, threading.Event(), threading.Event()

        def held_receive(platform: str, chat: str, message_id: str, payload: dict[str, Any]) -> Any:
            if payload.get("text") == "first":
                writing.set()
                release.wait(60)
            return real(platform, chat, message_id, payload)

        gateway.store.receive = held_receive  # type: ignore[method-assign]
        posts = [threading.Thread(target=wa.user_says, args=(USER, "first"))]
        posts[0].start()
        assert writing.wait(60)
        posts.append(threading.Thread(target=wa.user_says, args=(USER, "second")))
        posts[1].start()
        arrivals = gateway._arrivals
        _until(lambda: not posts[1].is_alive() or arrivals.pending(f"whatsapp:{USER}") == 2)
        release.set()
        for post in posts:
            post.join(60)
        wait_answered(gateway, 2)
    assert [r["messages"][-1]["content"] for r in fake_llm.requests] == ["first", "second"]
    # "second" has a turn of its own, or (stored while the first turn still ran) steers it: one reply
    assert "\n\n".join(wa.texts(USER)) == "one\n\ntwo"


def _until(check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "never came to pass"
        time.sleep(0.02)


def test_an_unsigned_or_forged_webhook_is_refused_and_the_subscription_check_needs_the_verify_token(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    with Running(_settings(tmp_path, fake_llm.url, wa)) as gateway:
        wa.wait_listening()
        body = json.dumps({"object": "whatsapp_business_account", "entry": []}).encode()
        forged = "sha256=" + hmac.new(b"not the secret", body, hashlib.sha256).hexdigest()
        for headers, code in (({}, 401), ({"X-Hub-Signature-256": forged}, 403)):
            request = urllib.request.Request(
                wa.webhook_url, body, {"Content-Type": "application/json"} | headers
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)  # noqa: S310 (loopback)
            assert refused.value.code == code
        good = f"{wa.webhook_url}?hub.mode=subscribe&hub.verify_token={VERIFY_TOKEN}&hub.challenge=4242"
        with urllib.request.urlopen(good, timeout=10) as answer:  # noqa: S310 (loopback)
            assert answer.read() == b"4242"
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(good.replace(VERIFY_TOKEN, "wrong"), timeout=10)  # noqa: S310
        assert gateway.store.last_inbound("whatsapp") is None and fake_llm.requests == []


def test_a_stranger_gets_a_pairing_code(tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin) -> None:
    with Running(_settings(tmp_path, fake_llm.url, wa)):
        wa.user_says("US.99999999999999999999", "let me in")
        (told,) = wa.wait_for(lambda: wa.texts("US.99999999999999999999"))
        assert "hermetic gateway pair" in told and fake_llm.requests == []


def test_an_approval_is_reply_buttons_and_a_press_answers_it(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    fake_llm.load([{"tool_calls": [{"name": "open_port", "arguments": {"port": 9000}}]}, {"text": "Opened."}])
    settings = _settings(tmp_path, fake_llm.url, wa).model_copy(update={"toolsets": ["files", "test"]})
    with Running(settings, asking_registry(timeout=300)) as gateway:
        wa.user_says(USER, "open 9000")
        (asked,) = wa.wait_for(lambda: [m for m in wa.messages_to(USER) if m["type"] == "interactive"])
        buttons = asked["interactive"]["action"]["buttons"]
        assert [b["reply"]["title"] for b in buttons] == ["once", "always", "no"]
        wa.press(USER, asked["id"], buttons[1]["reply"]["id"], "always")
        wait_answered(gateway, 2)
        assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: always"


def test_a_question_of_more_than_three_choices_is_a_list_message_whose_row_answers_it(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    colours = ["red", "green", "blue", "yellow", "a very long colour name, cut"]
    ask = {"name": "clarify", "arguments": {"question": "Which **colour**?", "choices": colours}}
    fake_llm.load([{"tool_calls": [ask]}, {"text": "Yellow it is."}])
    settings = _settings(tmp_path, fake_llm.url, wa).model_copy(update={"toolsets": ["clarify"]})
    with Running(settings) as gateway:
        wa.user_says(USER, "paint it")
        (asked,) = wa.wait_for(lambda: [m for m in wa.messages_to(USER) if m["type"] == "interactive"])
        assert (
            asked["interactive"]["type"] == "list"
            and asked["interactive"]["body"]["text"] == "Which *colour*?"
        )
        (section,) = asked["interactive"]["action"]["sections"]
        titles = [row["title"] for row in section["rows"]]
        assert titles == colours[:4] + ["a very long colour name,"], "every choice, titles of 24"
        wa.press(USER, asked["id"], section["rows"][3]["id"], "yellow", kind="list_reply")
        wait_answered(gateway, 2)
    assert fake_llm.requests[1]["messages"][-1]["content"] == "the user answered: yellow"
    assert wa.texts(USER)[-1] == "Yellow it is."


def test_a_reply_outside_the_24_hour_window_sends_the_template_that_explains_it(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    fake_llm.load([{"text": "too late"}])
    with Running(_settings(tmp_path, fake_llm.url, wa)) as gateway:
        wa.user_says(USER, "a message from long ago", at=time.time() - 25 * 3600)
        (template,) = wa.wait_for(lambda: [m for m in wa.messages_to(USER) if m["type"] == "template"])
        assert template["template"]["name"] == "hermetic_window_closed"
        assert wa.texts(USER) == [], "no free-form message went out"
        assert gateway.store.last_inbound("whatsapp") is not None


def test_a_document_the_user_sends_lands_in_the_sandbox_uploads(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    fake_llm.load([{"text": "got it"}])
    media = wa.upload("data.csv", b"a,b\n1,2\n")
    with Running(_settings(tmp_path, fake_llm.url, wa)) as gateway:
        document = {"id": media, "mime_type": "text/csv", "sha256": "0", "filename": "data.csv"}
        wa.user_says(USER, message={"type": "document", "document": document})
        wait_answered(gateway, 1)
        assert wa.called("GET", media)
        assert "uploads/data.csv" in fake_llm.requests[0]["messages"][-1]["content"]


def test_a_voice_note_is_taken_and_a_video_over_the_cap_is_refused_before_it_is_downloaded(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    fake_llm.load([{"text": "heard you"}, {"text": "no video then"}])
    voice, video = wa.upload("voice", b"OggS voice note"), wa.upload("clip", b"\0" * 5000)
    config = _config(wa) | {"max_file_bytes": 1000}
    with Running(gateway_settings(tmp_path, fake_llm.url, None, gateway={"whatsapp": config})) as gateway:
        note = {"id": voice, "mime_type": "audio/ogg; codecs=opus", "sha256": "0", "voice": True}
        wa.user_says(USER, message={"type": "audio", "audio": note})
        wait_answered(gateway, 1)
        assert f"uploads/{voice}.ogg (15 bytes)" in fake_llm.requests[0]["messages"][-1]["content"]
        clip = {"id": video, "mime_type": "video/mp4", "sha256": "0", "caption": "look at this"}
        wa.user_says(USER, message={"type": "video", "video": clip})
        wait_answered(gateway, 2)
    assert any(t.startswith(f"I could not take your file {video}.mp4") for t in wa.texts(USER))
    assert wa.called("GET", video) and not wa.called("GET", f"download/{video}"), "refused by its size"
    assert fake_llm.requests[1]["messages"][-1]["content"].startswith("look at this")


def test_a_kill_9_mid_turn_and_a_message_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    # WhatsApp cannot edit, so a reply goes out whole when done: the kill lands while a tool still runs
    # (30 s: the restart was seen to wait for that command; with a 10 s one the message sent while down
    # raced the rerun and took a fourth model request)
    slow = {"tool_calls": [{"name": "terminal", "arguments": {"command": "sleep 30"}}]}
    fake_llm.load([slow, *SCRIPT[1:]])
    env = gateway_profile(tmp_path, fake_llm.url, "whatsapp", _config(wa))
    kill_9_while_replying(
        env,
        lambda: wa.user_says(USER, "question one"),  # redelivered until the gateway listens and stores
        lambda: fake_llm.wait_requests(1),
    )
    # sent while no gateway listens: WhatsApp redelivers it until the restarted gateway answers 200
    later = threading.Thread(target=wa.user_says, args=(USER, "sent while the gateway was down"))
    later.start()
    answered_once_after_restart(env, "whatsapp", lambda: wa.texts(USER), wa.wait_for, fake_llm)
    later.join(30)


def test_a_file_the_agent_sends_is_uploaded_and_sent_as_a_document(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    fake_llm.load(SEND_A_FILE)
    with Running(_settings(tmp_path, fake_llm.url, wa)) as gateway:
        wa.user_says(USER, "a report please")
        wait_answered(gateway, 1)
        (document,) = [m for m in wa.messages_to(USER) if m["type"] == "document"]
        assert wa.media[document["document"]["id"]] == ("r.txt", b"numbers\n")


def test_an_image_the_agent_sends_is_an_image_message_shown_in_the_chat(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    write = {"name": "write_file", "arguments": {"path": "chart.png", "content": "pixels"}}
    send = {"name": "send_file", "arguments": {"path": "chart.png"}}
    fake_llm.load([{"tool_calls": [write]}, {"tool_calls": [send]}, {"text": "There."}])
    with Running(_settings(tmp_path, fake_llm.url, wa)) as gateway:
        wa.user_says(USER, "a chart please")
        wait_answered(gateway, 1)
        (image,) = [m for m in wa.messages_to(USER) if m["type"] == "image"]
        assert wa.media[image["image"]["id"]] == ("chart.png", b"pixels")


def test_a_kill_9_after_whatsapp_took_the_reply_but_before_it_was_recorded_does_not_answer_twice(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    """WhatsApp cannot edit a reply, so a rerun cannot put right a reply that may be out: a reply is
    sent at most once. The kill lands while WhatsApp has the reply and the gateway waits for the answer
    to its POST (the window between send and record); the restarted gateway marks it answered."""
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT[1:])
    env = gateway_profile(tmp_path, fake_llm.url, "whatsapp", _config(wa))
    wa.hold_replies()
    kill_9_while_replying(
        env,
        lambda: wa.user_says(USER, "question one"),
        lambda: wa.wait_for(lambda: wa.texts(USER) == ["answer one"]),
    )
    wa.release()
    again = start_gateway(env)
    try:
        wait_all_answered(tmp_path, "whatsapp", timeout=120)  # a rerun would send before it marks
        again.send_signal(signal.SIGINT)
        assert again.wait(30) == 0, "Ctrl-C stops the gateway cleanly"
    finally:
        again.kill()
        _, errors = again.communicate(timeout=10)
    assert wa.texts(USER) == ["answer one"], errors
    assert len(fake_llm.requests) == 1, "the turn whose reply was out did not run again"
    assert "may be out: not sent again" in errors


def test_a_reply_recorded_as_out_is_neither_rerun_nor_edited_after_a_restart(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    """Killed after the reply's id was recorded but before the message was marked answered: the restart
    marks it answered (WhatsApp cannot edit the reply, so a rerun could only send a second one)."""
    settings = _settings(tmp_path, fake_llm.url, wa)
    store = GatewayStore(str(settings.database_url))
    inbound = Inbound(platform="whatsapp", chat=USER, message_id="wamid.1", user=USER, text="question one")
    stored = store.receive("whatsapp", USER, "wamid.1", inbound.model_dump())
    assert stored is not None
    store.mark(stored, state="running", reply_id="wamid.sent")
    store.close()
    with Running(settings) as gateway:
        wait_answered(gateway, 1)  # once WhatsApp is connected, before anything new is received
        assert gateway.store.unanswered("whatsapp") == []
    assert fake_llm.requests == [] and wa.messages_to(USER) == []


GROUP = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"
"""A group's id, as the Groups API names groups."""


def _group_settings(tmp_path: Path, llm_url: str, wa: WhatsAppStandin) -> Any:
    config = _config(wa) | {"allow_chats": [GROUP]}
    return gateway_settings(tmp_path, llm_url, None, gateway={"whatsapp": config})


def _replying_to(message_id: str, text: str) -> dict[str, Any]:
    return {"type": "text", "text": {"body": text}, "context": {"from": NUMBER, "id": message_id}}


def test_in_a_group_the_bot_answers_there_only_when_mentioned_or_replied_to(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    fake_llm.load([{"text": "first answer"}, {"text": "second answer"}])
    with Running(_group_settings(tmp_path, fake_llm.url, wa)) as gateway:
        wa.user_says(USER, "talking among ourselves", group=GROUP)  # not addressed: taken, not stored
        wa.user_says(USER, f"@{NUMBER} what is new?", group=GROUP)
        wait_answered(gateway, 1)
        assert wa.texts(GROUP) == ["first answer"] and wa.texts(USER) == []
        assert fake_llm.requests[0]["messages"][-1]["content"].endswith("what is new?")
        assert "@" not in fake_llm.requests[0]["messages"][-1]["content"]  # the mention is not the question
        (answer,) = wa.messages_to(GROUP)
        assert answer["recipient_type"] == "group"
        wa.user_says(USER, message=_replying_to(answer["id"], "and then?"), group=GROUP)
        wait_answered(gateway, 2)
        assert wa.texts(GROUP) == ["first answer", "second answer"] and len(fake_llm.requests) == 2


def test_in_a_group_a_question_lists_its_choices_and_a_reply_answers_it(
    tmp_path: Path, fake_llm: Any, wa: WhatsAppStandin
) -> None:
    fake_llm.load([{"tool_calls": [{"name": "open_port", "arguments": {"port": 9000}}]}, {"text": "Opened."}])
    settings = _group_settings(tmp_path, fake_llm.url, wa).model_copy(update={"toolsets": ["files", "test"]})
    with Running(settings, asking_registry(timeout=300)) as gateway:
        wa.user_says(USER, f"@{NUMBER} open 9000", group=GROUP)
        (asked,) = wa.wait_for(lambda: [m for m in wa.messages_to(GROUP) if "Expose port" in str(m)])
        assert asked["type"] == "text"
        assert "(reply with your answer (once, always, no))" in asked["text"]["body"]
        wa.user_says(USER, message=_replying_to(asked["id"], "always"), group=GROUP)
        wait_answered(gateway, 2)
        assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: always"
        assert not [c for c in wa.calls if c[2].get("type") == "interactive"], "no buttons were sent to it"
