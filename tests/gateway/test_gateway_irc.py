"""The gateway on IRC: pydle against a real ngIRCd started for the session (tests/support/ngircd.py), people
on it as plain-socket clients, the scripted model behind the agent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import APPROVE_THEN_SEND_FILE, Running, asking_registry, gateway_settings, wait_answered
from ngircd import IrcUser, Ngircd, irc_config, wait_for

from control_plane.config.chat import IrcSettings
from control_plane.gateway import Gateway
from control_plane.gateway.base import AdapterError, ConnectionLost
from control_plane.gateway.irc import IrcAdapter, Pacer


@pytest.fixture
def alice(irc_server: Ngircd, request: pytest.FixtureRequest) -> Iterator[IrcUser]:
    """The owner, with a nick of this test's own (a line still on its way from another test's bot
    must not reach this one); the bot's nick is the test's too, for the same reason."""
    user = IrcUser(irc_server, f"alice{_number(request)}")
    yield user
    user.close()


def _number(request: pytest.FixtureRequest) -> int:
    return list(request.session.items).index(request.node)


def _settings(tmp_path: Path, llm_url: str, server: Ngircd, alice: IrcUser, **extra: Any) -> Any:
    config = irc_config(server, nick=_bot(alice), allow_users=[alice.nick], flood_interval=0.05) | extra
    return gateway_settings(tmp_path, llm_url, None, gateway={"irc": config})


def _bot(alice: IrcUser) -> str:
    return alice.nick.replace("alice", "bot")


def _on_server(gateway: Gateway) -> None:
    wait_for(lambda: gateway.status["irc"].state == "connected")


def test_a_private_message_is_answered_in_plain_text_line_by_line(
    tmp_path: Path, fake_llm: Any, irc_server: Ngircd, alice: IrcUser
) -> None:
    long_line = " ".join(f"w{i}" for i in range(150))  # about 800 bytes: two PRIVMSGs
    reply = f"# Result\n\nThis is **bold** and [docs](https://example.test/d).\n\n- one\n- two\n\n{long_line}"
    fake_llm.load([{"text": reply, "delay": 0.5}, {"text": "after the steers"}])
    with Running(_settings(tmp_path, fake_llm.url, irc_server, alice)) as gateway:
        _on_server(gateway)
        for text in ("first question", "second", "third", "fourth"):
            alice.say(_bot(alice), text)
        lines = alice.hear_until("w149")
        wait_answered(gateway, 4)
        stored = [r.payload["text"] for r in gateway.store.unanswered("irc")]
        with gateway.store._engine.connect() as conn:
            from sqlalchemy import select

            from control_plane.gateway.records import InboundRecord

            rows = conn.execute(select(InboundRecord.payload).order_by(InboundRecord.id)).scalars().all()  # type: ignore[call-overload]
    assert not stored
    assert [row["text"] for row in rows] == ["first question", "second", "third", "fourth"], "in order"
    assert lines[:4] == ["Result", "This is bold and docs (https://example.test/d).", "- one", "- two"]
    assert all(len(line.encode()) <= 400 for line in lines)
    assert " ".join(lines[4:]).split() == long_line.split(), "a long line is cut at spaces, nothing lost"
    asked = [m["content"] for r in fake_llm.requests for m in r["messages"] if m["role"] == "user"]
    assert asked[0] == "first question"


def test_in_a_channel_only_lines_addressed_to_the_nick_are_answered_and_only_allowed_channels(
    tmp_path: Path, fake_llm: Any, irc_server: Ngircd, alice: IrcUser
) -> None:
    fake_llm.load([{"text": "hello channel"}])
    bot = _bot(alice)
    alice.join("#ops")
    alice.join("#other")
    with Running(_settings(tmp_path, fake_llm.url, irc_server, alice, allow_chats=["#ops"])) as gateway:
        wait_for(lambda: (bot, "#ops") in alice.joins)
        alice.say("#ops", "people talking among themselves")
        alice.say("#other", f"{bot}: are you here?")  # a channel not allowed: never joined
        alice.say("#ops", f"{bot}: who is on call?")
        assert alice.hear(1) == [(bot, "#ops", "hello channel")]
        wait_answered(gateway, 1)
    assert (bot, "#other") not in alice.joins
    (request,) = fake_llm.requests
    assert request["messages"][-1]["content"] == "who is on call?"


def test_a_stranger_gets_a_pairing_code_and_commands_answer_without_the_model(
    tmp_path: Path, fake_llm: Any, irc_server: Ngircd, alice: IrcUser
) -> None:
    fake_llm.load([])
    mallory = IrcUser(irc_server, alice.nick.replace("alice", "mallory"))
    try:
        with Running(_settings(tmp_path, fake_llm.url, irc_server, alice)) as gateway:
            _on_server(gateway)
            mallory.say(_bot(alice), "let me in")
            told = mallory.hear_until("The code works once")
            assert len(told) == 3 and told[1].startswith("hermetic gateway pair ")
            alice.say(_bot(alice), "/help")
            alice.hear_until("/new")
    finally:
        mallory.close()
    assert fake_llm.requests == []


def test_an_approval_is_answered_by_replying_and_a_file_is_refused_with_the_reason(
    tmp_path: Path, fake_llm: Any, irc_server: Ngircd, alice: IrcUser
) -> None:
    fake_llm.load(APPROVE_THEN_SEND_FILE)
    settings = _settings(tmp_path, fake_llm.url, irc_server, alice).model_copy(
        update={"toolsets": ["files", "test", "gateway"]}
    )
    with Running(settings, asking_registry(timeout=300)) as gateway:
        _on_server(gateway)
        alice.say(_bot(alice), "open 7000 and send me the notes")
        assert alice.hear(2) == [
            (_bot(alice), alice.nick, "Expose port 7000?"),
            (_bot(alice), alice.nick, "(reply with your answer (once, always, no))"),
        ]
        alice.say(_bot(alice), "once")
        assert alice.hear(1)[0][2] == "Opened; the notes are in n.md."
        wait_answered(gateway, 2)
    assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: once"
    assert "IRC carries no files" in fake_llm.requests[3]["messages"][-1]["content"]


def test_after_the_server_kills_the_connection_the_gateway_comes_back_and_answers(
    tmp_path: Path, fake_llm: Any, irc_server: Ngircd, alice: IrcUser
) -> None:
    from ngircd import OPERATOR, PASSWORD

    fake_llm.load([{"text": "first"}, {"text": "second"}])
    bot = _bot(alice)
    with Running(_settings(tmp_path, fake_llm.url, irc_server, alice)) as gateway:
        _on_server(gateway)
        alice.say(bot, "one")
        assert alice.hear(1)[0][2] == "first"
        alice.send(f"OPER {OPERATOR} {PASSWORD}", f"KILL {bot} :testing reconnection")
        wait_for(lambda: any("testing reconnection" in e for e in gateway.status["irc"].errors))
        alice.wait_online(bot)
        _on_server(gateway)
        alice.say(bot, "two")
        assert alice.hear(1)[0][2] == "second"
        wait_answered(gateway, 2)


def test_a_wrong_server_password_is_reported_and_sasl_the_server_does_not_offer_is_refused(
    irc_server: Ngircd, alice: IrcUser
) -> None:
    async def connect(expected: type[Exception], **extra: Any) -> str:
        adapter = IrcAdapter(IrcSettings.model_validate(irc_config(irc_server, nick=_bot(alice), **extra)))
        with pytest.raises(expected) as failed:
            await adapter.connect()
        return str(failed.value)

    # the server's ERROR says why; IRC does not say whether it is final, so the gateway retries it
    assert "Bad password" in asyncio.run(connect(ConnectionLost, password="wrong"))
    # ngIRCd offers no SASL: a bot configured for it stays out rather than joining unauthenticated
    refused = asyncio.run(connect(AdapterError, sasl_username="bot", sasl_password="secret"))
    assert "does not offer" in refused


def test_a_second_gateway_waits_while_the_nick_is_held_rather_than_taking_another(
    irc_server: Ngircd, alice: IrcUser
) -> None:
    async def both() -> str:
        first = IrcAdapter(IrcSettings.model_validate(irc_config(irc_server, nick=_bot(alice))))
        await first.connect()
        second = IrcAdapter(IrcSettings.model_validate(irc_config(irc_server, nick=_bot(alice))))
        try:
            with pytest.raises(ConnectionLost) as lost:
                await second.connect()
        finally:
            await first.disconnect()
        return str(lost.value)

    assert f"{_bot(alice)!r} is in use" in asyncio.run(both())
    alice.send(f"WHOIS {_bot(alice)}_")  # no `nick_` stand-in was left behind
    wait_for(lambda: any(" 401 " in line and f"{_bot(alice)}_" in line for line in alice.lines))


def test_the_pacer_lets_a_burst_through_then_one_line_per_interval() -> None:
    now = [0.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    async def lines(count: int) -> None:
        pacer = Pacer(3, 2.0, clock=lambda: now[0], sleep=sleep)
        for _ in range(count):
            await pacer.wait()
        now[0] += 5.0  # idle: tokens come back, at most the burst
        for _ in range(3):
            await pacer.wait()

    asyncio.run(lines(5))
    assert slept == [2.0, 2.0, 1.0]  # 3 free, 2 paced; 5 s idle give 2.5 tokens: 2 free, 1 half paced


def test_a_kill_9_mid_turn_is_answered_once_after_the_restart(
    tmp_path: Path, fake_llm: Any, irc_server: Ngircd, alice: IrcUser
) -> None:
    import signal

    from gateway_process import SCRIPT, gateway_profile, restarted, start_gateway, wait_all_answered

    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    bot = _bot(alice)
    env = gateway_profile(
        tmp_path, fake_llm.url, "irc", irc_config(irc_server, nick=bot, allow_users=[alice.nick])
    )
    first = start_gateway(env)
    try:
        alice.wait_online(bot)
        alice.say(bot, "question one")
        fake_llm.wait_requests(1)  # the turn runs: its reply is still being written
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
        first.wait(10)
    with restarted(env) as again:
        alice.wait_online(bot)  # the killed one's nick is freed once the server sees its socket close
        assert alice.hear(1) == [(bot, alice.nick, "answer one")], "the stored message was answered"
        alice.say(bot, "question two")
        assert alice.hear(1) == [(bot, alice.nick, "answer two")]
        wait_all_answered(tmp_path, "irc")
    assert len(fake_llm.requests) == 3, (
        f"the cut-off turn ran again once, the next message once: {again.errors}"
    )
    assert alice.heard.empty(), "nothing was said twice"
