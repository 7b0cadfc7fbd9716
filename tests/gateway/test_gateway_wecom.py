"""The gateway on WeCom: the adapter against the server API stand-in (tests/standins/wecom_standin.py), the
stand-in posting encrypted, signed callbacks to the gateway's listener, the scripted model behind the
agent."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import SEND_A_FILE, Running, asking_registry, gateway_settings, wait_answered
from wecom_standin import AES_KEY, CORP_ID, WeComStandin, message_xml

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
    fake_llm.load([{"text": "hello from the agent"}])
    with Running(_settings(tmp_path, fake_llm.url, wecom)) as gateway:
        message = wecom.user_says(USER, "hello from wecom")
        stored = gateway.store.last_inbound("wecom")
        assert stored is not None and stored.message_id == message["MsgId"], "stored before the 200"
        wait_answered(gateway, 1)
        (sent,) = wecom.messages_to(USER)
        assert sent["msgtype"] == "text" and sent["agentid"] == 1000002
        assert sent["text"]["content"] == "hello from the agent"
        wecom.deliver(message)  # WeCom's retry of the same MsgId: 200, not answered again
        wecom.user_says(USER, "/help")
        wait_answered(gateway, 2)
        assert len(fake_llm.requests) == 1 and "/new" in wecom.texts(USER)[1]
        assert len(wecom.texts(USER)) == 2


def test_a_long_reply_is_split_at_2048_bytes_without_breaking_its_code_block(
    tmp_path: Path, fake_llm: Any, wecom: WeComStandin
) -> None:
    code = "\n".join(f"print('第{n}行')  # 中文注释" for n in range(120))
    fake_llm.load([{"text": f"Here it is:\n\n```python\n{code}\n```\n\nDone."}])
    with Running(_settings(tmp_path, fake_llm.url, wecom)) as gateway:
        wecom.user_says(USER, "a long program please")
        wait_answered(gateway, 1)
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
