"""The gateway on XMPP: slixmpp against a real Prosody started for the session (tests/support/prosody.py),
people on it as slixmpp clients of their own, the scripted model behind the agent."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from gateway_harness import APPROVE_THEN_SEND_FILE, Running, asking_registry, gateway_settings, wait_answered
from ngircd import wait_for
from prosody import ROOMS, Prosody, XmppUser, final_texts, xmpp_config

from control_plane.config.chat import XmppSettings
from control_plane.gateway import Gateway
from control_plane.gateway.base import AdapterError
from control_plane.gateway.xmpp import XmppAdapter


def _number(request: pytest.FixtureRequest) -> int:
    return list(request.session.items).index(request.node)


@pytest.fixture
def alice(xmpp_server: Prosody, request: pytest.FixtureRequest) -> Iterator[XmppUser]:
    """The owner; she and the bot have accounts of this test's own (nothing of another test's reaches
    this one)."""
    user = XmppUser(xmpp_server, f"alice{_number(request)}")
    yield user
    user.close()


def _bot(alice: XmppUser) -> str:
    return alice.jid.replace("alice", "bot")


def _bot_config(server: Prosody, alice: XmppUser, **extra: Any) -> dict[str, Any]:
    return xmpp_config(server, server.register(_bot(alice).split("@")[0]), allow_users=[alice.jid]) | extra


def _settings(tmp_path: Path, llm_url: str, server: Prosody, alice: XmppUser, **extra: Any) -> Any:
    return gateway_settings(tmp_path, llm_url, None, gateway={"xmpp": _bot_config(server, alice, **extra)})


def _online(gateway: Gateway) -> None:
    wait_for(lambda: gateway.status["xmpp"].state == "connected")


def test_a_one_to_one_reply_streams_as_corrections_of_one_message_in_plain_text(
    tmp_path: Path, fake_llm: Any, xmpp_server: Prosody, alice: XmppUser
) -> None:
    words = " ".join(f"w{i}" for i in range(40))
    fake_llm.load(
        [{"text": f"# Result\n\nThis is **bold**: {words} done.", "pace": 0.02}, {"text": "second"}]
    )
    with Running(_settings(tmp_path, fake_llm.url, xmpp_server, alice)) as gateway:
        _online(gateway)
        alice.say(_bot(alice), "first question")
        first, corrections = alice.hear_reply("done.")
        wait_answered(gateway, 1)
        alice.say(_bot(alice), "and another")
        assert alice.hear_reply("second")[0].body == "second"
        wait_answered(gateway, 2)
    assert first.sender == _bot(alice)
    assert corrections, "the reply streamed by corrections"
    assert {c.replaces for c in corrections} == {first.id}, "each corrects the first message (XEP-0308)"
    assert corrections[-1].body == f"Result\n\nThis is bold: {words} done."
    asked = [m["content"] for r in fake_llm.requests for m in r["messages"] if m["role"] == "user"]
    assert asked[0] == "first question" and asked[-1] == "and another"


def test_in_a_room_only_messages_addressed_to_the_nick_are_answered_and_only_allowed_rooms(
    tmp_path: Path, fake_llm: Any, xmpp_server: Prosody, alice: XmppUser
) -> None:
    fake_llm.load([{"text": "hello room"}])
    ops, other = f"ops-{alice.jid.split('@')[0]}@{ROOMS}", f"other-{alice.jid.split('@')[0]}@{ROOMS}"
    alice.join(ops, "alice")
    alice.join(other, "alice")
    settings = _settings(tmp_path, fake_llm.url, xmpp_server, alice, allow_chats=[ops], nick="hermes")
    with Running(settings) as gateway:
        _online(gateway)
        assert "hermes" in alice.occupants(ops) and "hermes" not in alice.occupants(other)
        alice.say(ops, "people talking among themselves", "groupchat")
        alice.say(other, "hermes: are you here?", "groupchat")
        alice.say(ops, "hermes, who is on call?", "groupchat")
        heard = [alice.hear() for _ in range(3)]  # the room reflects alice's three first
        first, corrections = alice.hear_reply("hello room")  # the answer, streamed by corrections
        wait_answered(gateway, 1)
    assert not [h for h in heard if h.sender.endswith("/hermes")]
    assert first.sender == f"{ops}/hermes" and all(c.sender == first.sender for c in corrections)
    assert final_texts([first, *corrections]) == {first.id: "hello room"}
    (request,) = fake_llm.requests
    assert request["messages"][-1]["content"] == "who is on call?"


def test_a_stranger_gets_a_pairing_code_and_commands_answer_without_the_model(
    tmp_path: Path, fake_llm: Any, xmpp_server: Prosody, alice: XmppUser
) -> None:
    fake_llm.load([])
    mallory = XmppUser(xmpp_server, alice.jid.split("@")[0].replace("alice", "mallory"))
    try:
        with Running(_settings(tmp_path, fake_llm.url, xmpp_server, alice)) as gateway:
            _online(gateway)
            mallory.say(_bot(alice), "let me in")
            told = mallory.hear().body
            assert "hermetic gateway pair " in told and "The code works once" in told
            alice.say(_bot(alice), "/help")
            assert "/new" in alice.hear().body
    finally:
        mallory.close()
    assert fake_llm.requests == []


def test_an_approval_is_answered_by_replying_and_a_file_goes_out_by_http_upload_with_an_oob_url(
    tmp_path: Path, fake_llm: Any, xmpp_server: Prosody, alice: XmppUser
) -> None:
    fake_llm.load(APPROVE_THEN_SEND_FILE)
    settings = _settings(tmp_path, fake_llm.url, xmpp_server, alice).model_copy(
        update={"toolsets": ["files", "test", "gateway"]}
    )
    with Running(settings, asking_registry(timeout=30)) as gateway:
        _online(gateway)
        alice.say(_bot(alice), "open 7000 and send me the notes")
        heard = [alice.hear()]
        while "Expose port 7000?" not in heard[-1].body:
            heard.append(alice.hear())
        assert "(reply with your answer (once, always, no))" in heard[-1].body
        alice.say(_bot(alice), "once")
        heard.append(alice.hear())
        while heard[-1].oob is None:
            heard.append(alice.hear())
        wait_answered(gateway, 2)
    assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: once"
    sent = heard[-1]
    assert sent.sender == _bot(alice) and sent.body == sent.oob, "the URL as the body too: shown inline"
    assert sent.oob.startswith(f"http://127.0.0.1:{xmpp_server.http_port}/file_share/")
    assert sent.oob.endswith("/n.md")
    assert requests.get(sent.oob, timeout=10).content == b"# n\n", "the server keeps the file's bytes"
    assert fake_llm.requests[3]["messages"][-1]["content"] == "sent n.md to the chat"


def _uploaded(gateway: Gateway, name: str, into: Path) -> bytes:
    """The bytes of uploads/`name` in the XMPP session's sandbox."""
    (session,) = [s for s in gateway.agent.store.list_sessions("default") if s.source == "xmpp"]
    return gateway.agent.sandboxes.get(session.id).download(f"uploads/{name}", into).read_bytes()


def test_a_file_a_user_uploads_lands_in_uploads_and_the_text_is_answered_once(
    tmp_path: Path, fake_llm: Any, xmpp_server: Prosody, alice: XmppUser
) -> None:
    data = bytes(range(256)) * 20
    fake_llm.load([{"text": "got the data"}, {"text": "and the link"}])
    hosts = [f"127.0.0.1:{xmpp_server.http_port}"]
    with Running(_settings(tmp_path, fake_llm.url, xmpp_server, alice, file_hosts=hosts)) as gateway:
        _online(gateway)
        url = alice.send_file(_bot(alice), "my data.bin", data)
        assert alice.hear_reply("got the data")[0].oob is None
        wait_answered(gateway, 1)
        assert _uploaded(gateway, "my_data.bin", tmp_path / "out") == data
        (request,) = fake_llm.requests
        told = request["messages"][-1]["content"]
        assert "uploads/my_data.bin (5,120 bytes)" in told and url not in told
        alice.say(_bot(alice), "see https://elsewhere.invalid/x.bin")  # a link, not a file: just text
        alice.hear_reply("and the link")
        wait_answered(gateway, 2)
    assert fake_llm.requests[1]["messages"][-1]["content"] == "see https://elsewhere.invalid/x.bin"


@pytest.mark.parametrize("limits", ["no-hosts", "over-the-cap"])
def test_a_file_not_taken_is_said_to_the_user_and_the_text_answered(
    tmp_path: Path, fake_llm: Any, xmpp_server: Prosody, alice: XmppUser, limits: str
) -> None:
    fake_llm.load([{"text": "the words answered"}])
    extra: dict[str, Any] = (
        {"file_hosts": [f"127.0.0.1:{xmpp_server.http_port}"], "max_file_bytes": 100}
        if limits == "over-the-cap"
        else {}
    )
    with Running(_settings(tmp_path, fake_llm.url, xmpp_server, alice, **extra)) as gateway:
        _online(gateway)
        alice.send_file(_bot(alice), "big.bin", b"x" * 101, text="look at this")
        refusal = alice.hear()
        assert refusal.body.startswith("I could not take your file big.bin: ")
        expected = "larger than the 100 bytes" if extra else "files are taken only from no host"
        assert expected in refusal.body
        alice.hear_reply("the words answered")
        wait_answered(gateway, 1)
    (request,) = fake_llm.requests
    assert "look at this" in request["messages"][-1]["content"]


def test_a_message_sent_while_the_gateway_is_away_is_answered_and_a_conflict_reconnects(
    tmp_path: Path, fake_llm: Any, xmpp_server: Prosody, alice: XmppUser
) -> None:
    fake_llm.load([{"text": "kept for me"}, {"text": "back again"}])
    _bot_config(xmpp_server, alice)
    alice.say(_bot(alice), "while you were out")  # the server keeps it (offline storage)
    with Running(_settings(tmp_path, fake_llm.url, xmpp_server, alice)) as gateway:
        assert alice.hear_reply("kept for me")
        # another login with the bot's resource: the server ends the gateway's stream (conflict)
        XmppUser(xmpp_server, _bot(alice).split("@")[0], resource="hermetic").close()
        wait_for(lambda: any("conflict" in e for e in gateway.status["xmpp"].errors))
        _online(gateway)
        alice.say(_bot(alice), "still there?")
        assert alice.hear_reply("back again")
        wait_answered(gateway, 2)


def test_a_wrong_password_and_a_server_without_tls_are_refused(xmpp_server: Prosody, alice: XmppUser) -> None:
    async def connect(**extra: Any) -> str:
        config = _bot_config(xmpp_server, alice) | extra
        adapter = XmppAdapter(XmppSettings.model_validate(config))
        with pytest.raises(AdapterError) as failed:
            await adapter.connect()
        return str(failed.value)

    assert "refused the password" in asyncio.run(connect(password="wrong"))
    # the test server offers no STARTTLS: a bot that requires TLS keeps its password to itself
    assert "no TLS" in asyncio.run(connect(tls=True))


def test_a_kill_9_mid_reply_is_answered_once_after_the_restart(
    tmp_path: Path, fake_llm: Any, xmpp_server: Prosody, alice: XmppUser
) -> None:
    from gateway_process import SCRIPT, gateway_profile, restarted, start_gateway, wait_all_answered

    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    bot = _bot(alice)
    env = gateway_profile(tmp_path, fake_llm.url, "xmpp", _bot_config(xmpp_server, alice))
    first = start_gateway(env)
    try:
        alice.say(bot, "question one")
        began = alice.hear()  # the reply is out
        # and being corrected: its first correction waits for the reply's id to be stored (not a kill
        # between the send and that write, which leaves the begun message as it was)
        corrected = alice.hear()
        assert corrected.replaces == began.id
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
        first.wait(10)
    alice.wait_offline(f"{bot}/hermetic")
    alice.say(bot, "question two")  # kept by the server while no gateway is logged in
    heard = [began, corrected]
    with restarted(env) as again:
        # question two is answered on its own or, arriving while the rerun runs, steers it
        while not {"answer one", "answer two"} <= set("\n".join(final_texts(heard).values()).split("\n")):
            heard.append(alice.hear())
        wait_all_answered(tmp_path, "xmpp")
    assert len(fake_llm.requests) == 3, (
        f"the cut-off turn ran again once, the next message once: {again.errors}"
    )
    texts = final_texts(heard)
    assert texts[began.id].startswith("answer one"), "the rerun corrected the reply the killed run began"
    joined = "\n".join(texts.values())
    assert joined.count("answer one") == 1 and joined.count("answer two") == 1 and "slow reply" not in joined
    assert alice.heard.empty(), "nothing was said twice"
