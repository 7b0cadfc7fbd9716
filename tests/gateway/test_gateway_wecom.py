"""The gateway on WeCom: the adapter against the server API stand-in (tests/standins/wecom_standin.py), the
stand-in posting encrypted, signed callbacks to the gateway's listener, the scripted model behind the
agent."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import SEND_A_FILE, Running, asking_registry, gateway_settings, wait_answered
from gateway_process import SCRIPT, answered_once_after_restart, gateway_profile, kill_9_while_replying
from wecom_standin import AES_KEY, CORP_ID, WeComStandin, message_xml

from control_plane.gateway.wecom_crypto import CallbackCipher, Refused

USER = "ZhangSan"


@pytest.fixture
def wecom() -> Iterator[WeComStandin]:
    server = WeComStandin()
    yield server
    server.close()


def _settings(tmp_path: Path, llm_url: str, wecom: WeComStandin) -> Any:
    return gateway_settings(tmp_path, llm_url, None, gateway={"wecom": wecom.gateway_config([USER])})


def test_the_url_check_is_answered_and_unsigned_or_foreign_callbacks_are_refused(
    tmp_path: Path, fake_llm: Any, wecom: WeComStandin
) -> None:
    fake_llm.load([{"text": "still here"}])
    with Running(_settings(tmp_path, fake_llm.url, wecom)) as gateway:
        wecom.wait_listening()
        assert wecom.verify_url("echo-4242") == (200, "echo-4242")
        assert wecom.verify_url("echo-4242", token="not-the-token") == (403, "bad msg_signature")
        plain = message_xml({"FromUserName": USER, "MsgType": "text", "Content": "hi", "MsgId": "1"})
        assert wecom.post_callback(plain, token="not-the-token") == (403, "bad msg_signature")
        status, said = wecom.post_callback(plain, receive_id="wwSOMEONEELSE")
        assert (status, said) == (403, "the receiveid is not this application's CorpID")
        other_key = AES_KEY[::-1]
        status, said = wecom.post_callback(plain, key=other_key)
        assert status == 403 and "EncodingAESKey" in said
        bomb = b'<!DOCTYPE x [<!ENTITY a "aaaa">]><xml><Encrypt>&a;</Encrypt></xml>'
        status, said = wecom.request("POST", {"msg_signature": "0", "timestamp": "1", "nonce": "n"}, bomb)
        assert status == 400 and "bad XML" in said
        assert gateway.store.last_inbound("wecom") is None and fake_llm.requests == []
        wecom.user_says(USER, "are you still up?")  # the refusals left the gateway running
        wait_answered(gateway, 1)
        assert wecom.texts(USER) == ["still here"]


def test_a_message_is_stored_before_the_200_answered_once_and_a_command_needs_no_model(
    tmp_path: Path, fake_llm: Any, wecom: WeComStandin
) -> None:
    fake_llm.load([{"text": "**hello** from the _agent_, see [the docs](https://example.org/d)"}])
    with Running(_settings(tmp_path, fake_llm.url, wecom)) as gateway:
        message = wecom.user_says(USER, "hello from wecom")
        stored = gateway.store.last_inbound("wecom")
        assert stored is not None and stored.message_id == message["MsgId"], "stored before the 200"
        wait_answered(gateway, 1)
        (sent,) = wecom.messages_to(USER)
        assert sent["msgtype"] == "text" and sent["agentid"] == 1000002
        assert sent["text"]["content"] == "hello from the agent, see the docs (https://example.org/d)", (
            "a text message shows no markup: the model's Markdown goes as plain text"
        )
        wecom.deliver(message)  # WeCom's retry of the same MsgId: 200, not answered again
        wecom.user_says(USER, "/help")
        wait_answered(gateway, 2)
        assert len(fake_llm.requests) == 1 and "/new" in wecom.texts(USER)[1]
        assert len(wecom.texts(USER)) == 2


def test_a_long_markdown_reply_is_split_at_2048_bytes_without_breaking_its_code_block(
    tmp_path: Path, fake_llm: Any, wecom: WeComStandin
) -> None:
    code = "\n".join(f"print('第{n}行')  # 中文注释" for n in range(120))
    fake_llm.load([{"text": f"Here it is:\n\n```python\n{code}\n```\n\nDone."}])
    config = wecom.gateway_config([USER]) | {"message_format": "markdown"}
    with Running(gateway_settings(tmp_path, fake_llm.url, None, gateway={"wecom": config})) as gateway:
        wecom.user_says(USER, "a long program please")
        wait_answered(gateway, 1)
        assert {m["msgtype"] for m in wecom.messages_to(USER)} == {"markdown"}
        parts = wecom.texts(USER)
        assert len(parts) >= 3 and all(len(p.encode()) <= 2048 for p in parts)
        assert all(p.count("```") % 2 == 0 for p in parts), "each part closes the fence it opens"
        assert all(p.lstrip().startswith("```python") for p in parts[1:-1]), "the fence is reopened"
        joined = "\n".join(parts)
        assert all(f"print('第{n}行')" in joined for n in range(120)) and parts[-1].endswith("Done.")


def test_an_expired_access_token_is_fetched_again_and_the_reply_still_goes_out(
    tmp_path: Path, fake_llm: Any, wecom: WeComStandin
) -> None:
    fake_llm.load([{"text": "one"}, {"text": "two"}])
    with Running(_settings(tmp_path, fake_llm.url, wecom)) as gateway:
        wecom.user_says(USER, "first")
        wait_answered(gateway, 1)
        assert len(wecom.called("gettoken")) == 1, "the token is kept between calls"
        wecom.expire_tokens()
        wecom.user_says(USER, "second")
        wait_answered(gateway, 2)
        assert wecom.texts(USER) == ["one", "two"]
        sends = [call["errcode"] for call in wecom.called("message/send")]
        assert sends == [0, 42001, 0] and len(wecom.called("gettoken")) == 2


def test_an_approval_is_a_button_card_and_a_press_answers_it_and_greys_the_card(
    tmp_path: Path, fake_llm: Any, wecom: WeComStandin
) -> None:
    fake_llm.load([{"tool_calls": [{"name": "open_port", "arguments": {"port": 9000}}]}, {"text": "Opened."}])
    settings = _settings(tmp_path, fake_llm.url, wecom).model_copy(update={"toolsets": ["files", "test"]})
    with Running(settings, asking_registry(timeout=300)) as gateway:
        wecom.user_says(USER, "open 9000")
        (card,) = wecom.wait_for(
            lambda: [m for m in wecom.messages_to(USER) if m["msgtype"] == "template_card"]
        )
        template = card["template_card"]
        assert template["card_type"] == "button_interaction"
        assert template["main_title"]["title"] == "Expose port 9000?"
        buttons = template["button_list"]
        assert [b["text"] for b in buttons] == ["once", "always", "no"]
        wecom.press(USER, card, buttons[1]["key"])
        wait_answered(gateway, 2)
        assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: always"
        (update,) = wecom.wait_for(lambda: wecom.updates)
        assert update["button"]["replace_name"] == "→ always" and update["userids"] == [USER]
        assert wecom.texts(USER) == ["Opened."]


def test_a_file_the_user_sends_lands_in_uploads_and_a_file_the_agent_sends_is_uploaded(
    tmp_path: Path, fake_llm: Any, wecom: WeComStandin
) -> None:
    fake_llm.load([{"text": "got it"}, *SEND_A_FILE])
    media = wecom.upload("photo.jpg", b"\xff\xd8\xff\xe0 a jpeg")
    with Running(_settings(tmp_path, fake_llm.url, wecom)) as gateway:
        wecom.user_says(USER, MsgType="image", MediaId=media, PicUrl="https://example.invalid/p.jpg")
        wait_answered(gateway, 1)
        assert [call["media_id"] for call in wecom.called("media/get") if "media_id" in call] == [media]
        told = fake_llm.requests[0]["messages"][-1]["content"]
        assert f"uploads/{media[:16]}-image.jpg" in told and "11 bytes" in told
        wecom.user_says(USER, "a report please")
        wait_answered(gateway, 2)
        (sent,) = [m for m in wecom.messages_to(USER) if m["msgtype"] == "file"]
        assert wecom.media[sent["file"]["media_id"]] == ("r.txt", b"numbers\n")


def test_a_stranger_gets_a_pairing_code_and_no_model_call(
    tmp_path: Path, fake_llm: Any, wecom: WeComStandin
) -> None:
    with Running(_settings(tmp_path, fake_llm.url, wecom)):
        wecom.user_says("LiSi", "let me in")
        (told,) = wecom.wait_for(lambda: wecom.texts("LiSi"))
        assert "hermetic gateway pair" in told and fake_llm.requests == []


def test_a_bad_secret_stops_the_platform_with_the_reason(
    tmp_path: Path, fake_llm: Any, wecom: WeComStandin
) -> None:
    config = wecom.gateway_config([USER]) | {"secret": "wrong", "corp_id": CORP_ID}
    settings = gateway_settings(tmp_path, fake_llm.url, None, gateway={"wecom": config})
    with Running(settings) as gateway:
        status = gateway.status["wecom"]
        deadline = time.monotonic() + 60
        while status.state != "stopped":
            assert time.monotonic() < deadline, f"never stopped: {status}"
            time.sleep(0.02)
        assert "errcode 40001" in status.errors[-1] and len(wecom.called("gettoken")) == 1


SAMPLE = ("QDG6eK", "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C", "wx5823bf96d3bd56c7")
"""Token, EncodingAESKey and CorpID of the test vectors in WeCom's published WXBizMsgCrypt samples."""
SAMPLE_MESSAGE = (
    "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3QczcdCUpj911L3vg3W/s"
    "YYvuJTs3TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kzJs8qLjvd4Xgpue06DOdnLxAUHzM6+kDZ+HMZf"
    "JYuR+LtwGc2hgf5gsijff0ekUNXZiqATP7PF5mZxZ3Izoun1s4zG4LUMnvw2r+KqCKIw+3IQH03v+BCA9nMELNqbSf6tiWSrXJB3LAV"
    "GUcallcrw8V2t9EL4EhzJWrQUax5wLVMNS0+rUPA3k22Ncx4XXZS9o0MBH27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVKn28H"
    "3KDYA5Pl/T8Z1ptDAVe0lXdQ2YoyyH2uyPIGHBZZIs2pDBS8R07+qN+E7Q=="
)


def test_the_cipher_opens_wecoms_published_sample_vectors_and_refuses_them_altered() -> None:
    cipher = CallbackCipher(*SAMPLE)
    echo = "P9nAzCzyDtyTWESHep1vC5X9xho/qYX3Zpb4yKa9SKld1DsH3Iyt3tP3zNdtp+4RPcs8TgAE7OaBO+FZXvnaqQ=="
    signed = ("5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3", "1409659589", "263014780")
    assert cipher.open(*signed, echo) == b"1616140317555161061"
    message = cipher.open(
        "477715d11cdb4164915debcba66cb864d751f3e6", "1409659813", "1372623149", SAMPLE_MESSAGE
    )
    assert (
        b"<Content><![CDATA[hello]]></Content>" in message
        and b"<MsgId>4561255354251345929</MsgId>" in message
    )
    with pytest.raises(Refused, match="bad msg_signature"):
        cipher.open(signed[0], "1409659590", signed[2], echo)
    with pytest.raises(Refused, match="receiveid"):
        CallbackCipher(SAMPLE[0], SAMPLE[1], "wwSOMEONEELSE").open(*signed, echo)
    with pytest.raises(ValueError, match="43 characters"):
        CallbackCipher(SAMPLE[0], SAMPLE[1][:-1], SAMPLE[2])


def test_a_kill_9_mid_turn_and_a_message_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, wecom: WeComStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    # WeCom cannot edit, so a reply goes out whole when done: the kill lands while a tool still runs
    # (30 s, as WhatsApp's test found: the message sent while down must not race the rerun)
    slow = {"tool_calls": [{"name": "terminal", "arguments": {"command": "sleep 30"}}]}
    fake_llm.load([slow, *SCRIPT[1:]])
    env = gateway_profile(tmp_path, fake_llm.url, "wecom", wecom.gateway_config([USER]))
    kill_9_while_replying(
        env,
        lambda: wecom.user_says(USER, "question one"),  # retried until the gateway listens and stores
        lambda: fake_llm.wait_requests(1),
    )
    # sent while no gateway listens: the callback is retried until the restarted gateway answers 200
    later = threading.Thread(target=wecom.user_says, args=(USER, "sent while the gateway was down"))
    later.start()
    answered_once_after_restart(env, "wecom", lambda: wecom.texts(USER), wecom.wait_for, fake_llm)
    later.join(30)
