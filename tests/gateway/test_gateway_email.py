"""The gateway on email: aioimaplib (IDLE) and aiosmtplib against a real Postfix and Dovecot started for
the session (tests/support/mailserver.py), people on it with mailboxes of their own, the scripted model behind
the agent."""

from __future__ import annotations

import asyncio
import email.utils
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import APPROVE_THEN_SEND_FILE, Running, asking_registry, gateway_settings, wait_answered
from mailserver import MailServer, MailUser, email_config, text_of
from ngircd import wait_for

from control_plane.config.chat import EmailSettings
from control_plane.gateway import Gateway, GatewayLocked, create_gateway
from control_plane.gateway.base import AdapterError
from control_plane.gateway.email import EmailAdapter
from control_plane.gateway.records import GatewayStore


@pytest.fixture
def alice(mail_server: MailServer, request: pytest.FixtureRequest) -> MailUser:
    """The owner; she and the bot have mailboxes of this test's own."""
    return MailUser(mail_server, f"alice{list(request.session.items).index(request.node)}")


@pytest.fixture
def bot(mail_server: MailServer, alice: MailUser) -> MailUser:
    """The bot's mailbox, which the test can read too."""
    return MailUser(mail_server, alice.address.split("@")[0].replace("alice", "bot"))


def _config(server: MailServer, bot: MailUser, allowed: list[str], **extra: Any) -> dict[str, Any]:
    return email_config(server, bot.address, allow_users=allowed) | extra


def _settings(tmp_path: Path, llm_url: str, server: MailServer, bot: MailUser, *allowed: str) -> Any:
    return gateway_settings(tmp_path, llm_url, None, gateway={"email": _config(server, bot, list(allowed))})


def _online(gateway: Gateway) -> None:
    status = gateway.status["email"]
    wait_for(lambda: status.state in ("connected", "stopped"))
    assert status.state == "connected", status.errors


def _asked(fake_llm: Any) -> list[str]:
    return [m["content"] for r in fake_llm.requests for m in r["messages"] if m["role"] == "user"]


def _reply_to(message: EmailMessage, sender: MailUser, text: str) -> EmailMessage:
    """A reply as a mail client writes it: Re: subject, the threading headers, the mail quoted below."""
    reply = EmailMessage()
    reply["To"], reply["Subject"] = (
        str(message["From"]),
        f"Re: {message['Subject']}".replace("Re: Re: ", "Re: "),
    )
    reply["In-Reply-To"] = str(message["Message-ID"])
    reply["References"] = f"{message.get('References', '')} {message['Message-ID']}".strip()
    quoted = "\n".join(f"> {line}" for line in text_of(message).splitlines())
    reply.set_content(f"{text}\n\nOn {message['Date']}, {message['From']} wrote:\n{quoted}\n")
    sender.send(reply)
    return reply


def test_a_mail_is_answered_in_its_thread_in_plain_text_and_html_and_each_thread_is_a_session(
    tmp_path: Path, fake_llm: Any, mail_server: MailServer, alice: MailUser, bot: MailUser
) -> None:
    fake_llm.load([{"text": "# Plan\n\nDeploy **on Friday**."}, {"text": "noted"}, {"text": "a new topic"}])
    with Running(_settings(tmp_path, fake_llm.url, mail_server, bot, alice.address.upper())) as gateway:
        _online(gateway)
        asked = alice.write(bot.address, "Deploy plan", "When do we deploy?")
        (reply,) = alice.receive()
        answered = _reply_to(reply, alice, "Friday works.")
        (second,) = alice.receive()
        alice.write(bot.address, "Something else", "Unrelated question")
        (third,) = alice.receive()
        wait_answered(gateway, 3)
    assert reply["Subject"] == "Re: Deploy plan" and reply["To"] == alice.address
    assert email.utils.parseaddr(str(reply["From"]))[1] == bot.address
    assert reply["In-Reply-To"] == asked["Message-ID"] and reply["References"] == asked["Message-ID"]
    assert reply["Auto-Submitted"] == "auto-replied", "marked, so an auto-responder does not answer it"
    assert text_of(reply) == "Plan\n\nDeploy on Friday.\n"
    assert "<h1>Plan</h1>" in text_of(reply, "html") and "<strong>on Friday</strong>" in text_of(
        reply, "html"
    )
    assert second["Subject"] == "Re: Deploy plan" and second["In-Reply-To"] != asked["Message-ID"]
    assert second["In-Reply-To"] == answered["Message-ID"]
    assert str(second["References"]).split() == [
        asked["Message-ID"],
        reply["Message-ID"],
        answered["Message-ID"],
    ]
    assert third["Subject"] == "Re: Something else"
    requests = fake_llm.requests
    assert _asked(fake_llm)[0] == "(subject: Deploy plan)\n\nWhen do we deploy?"
    assert [m["content"] for m in requests[1]["messages"] if m["role"] == "user"][-1] == "Friday works."
    assert len(requests[1]["messages"]) > len(requests[2]["messages"]), "the reply continued the session"
    assert "Deploy" not in str(requests[2]["messages"]), "a new thread is a new session"


def test_a_stranger_gets_a_pairing_code_and_commands_answer_without_the_model(
    tmp_path: Path, fake_llm: Any, mail_server: MailServer, alice: MailUser, bot: MailUser
) -> None:
    fake_llm.load([])
    mallory = MailUser(mail_server, alice.address.split("@")[0].replace("alice", "mallory"))
    with Running(_settings(tmp_path, fake_llm.url, mail_server, bot, alice.address)) as gateway:
        _online(gateway)
        asked = mallory.write(bot.address, "hello", "let me in")
        (told,) = mallory.receive()
        alice.write(bot.address, "commands", "/help")
        (helped,) = alice.receive()
    assert "hermetic gateway pair " in text_of(told) and told["In-Reply-To"] == asked["Message-ID"]
    assert "/new" in text_of(helped)
    assert fake_llm.requests == []


def test_bounces_auto_replies_and_list_mail_are_never_answered(
    tmp_path: Path, fake_llm: Any, mail_server: MailServer, alice: MailUser, bot: MailUser
) -> None:
    fake_llm.load([{"text": "to a ghost"}, {"text": "to alice"}])
    ghost = alice.address.replace("alice", "ghost")  # allowed, but no such mailbox: the reply bounces
    with Running(_settings(tmp_path, fake_llm.url, mail_server, bot, alice.address, ghost)) as gateway:
        _online(gateway)
        alice.write(bot.address, "Out of office", "I am away", Auto_Submitted="auto-replied")
        alice.write(bot.address, "[list] news", "weekly news", List_Id="<news.mail.test>")
        alice.write(bot.address, "bulk", "an offer", Precedence="bulk")
        alice.write(bot.address, "vacation", "away", X_Autoreply="yes")
        alice.write(bot.address, "anonymous", "no address to answer", From="undisclosed-recipients:;")
        alice.write(bot.address, "hi", "from a ghost", From=ghost)
        # Postfix's own bounce of the reply to the ghost comes back to the bot
        wait_for(lambda: any(m.get_content_type() == "multipart/report" for m in bot.inbox()))
        alice.write(bot.address, "last", "are you there?")
        (reply,) = alice.receive()  # mail is taken in order: the bounce was taken before this
        wait_answered(gateway, 2)
    assert text_of(reply) == "to alice\n"
    assert _asked(fake_llm) == ["(subject: hi)\n\nfrom a ghost", "(subject: last)\n\nare you there?"]
    assert len(bot.inbox()) == 8 and len(alice.inbox()) == 1


def test_files_reach_uploads_an_approval_is_a_reply_and_send_file_mails_the_file(
    tmp_path: Path, fake_llm: Any, mail_server: MailServer, alice: MailUser, bot: MailUser
) -> None:
    fake_llm.load(
        [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "uploads/data.csv"}}]},
            *APPROVE_THEN_SEND_FILE,
        ]
    )
    settings = _settings(tmp_path, fake_llm.url, mail_server, bot, alice.address).model_copy(
        update={"toolsets": ["files", "test", "gateway"]}
    )
    with Running(settings, asking_registry(timeout=60)) as gateway:
        _online(gateway)
        asked = EmailMessage()
        asked["To"], asked["Subject"] = bot.address, "numbers"
        asked.set_content("open 7000 and send me the notes")
        asked.add_attachment(b"a,b\n1,2\n", maintype="text", subtype="csv", filename="data.csv")
        alice.send(asked)
        (question,) = alice.receive()
        assert "Expose port 7000?" in text_of(question) and "(once, always, no)" in text_of(question)
        answer = _reply_to(question, alice, "once")
        sent, final = alice.receive(2)
        wait_answered(gateway, 2)
    read = fake_llm.requests[1]["messages"][-1]["content"]
    assert "a,b" in read and "1,2" in read, "the file was in uploads/"
    assert fake_llm.requests[2]["messages"][-1]["content"] == "answer: once"
    (attached,) = sent.iter_attachments()
    assert attached.get_filename() == "n.md" and attached.get_content() == "# n\n"
    assert question["In-Reply-To"] == asked["Message-ID"]
    assert sent["In-Reply-To"] == final["In-Reply-To"] == answer["Message-ID"], "all in the one thread"
    assert text_of(final) == "Opened; the notes are in n.md.\n"


def test_an_html_only_mail_and_one_in_an_unknown_charset_are_read_as_text(
    tmp_path: Path, fake_llm: Any, mail_server: MailServer, alice: MailUser, bot: MailUser
) -> None:
    fake_llm.load([{"text": "read it"}, {"text": "read that too"}])
    with Running(_settings(tmp_path, fake_llm.url, mail_server, bot, alice.address)) as gateway:
        _online(gateway)
        html = EmailMessage()
        html["To"], html["Subject"] = bot.address, "styled"
        html.set_content("<p>Hello <b>there</b></p><ul><li>one</li><li>two</li></ul>", subtype="html")
        alice.send(html)
        alice.receive()
        odd = (
            f"From: {alice.address}\r\nTo: {bot.address}\r\nSubject: odd\r\nMessage-ID: <odd@mail.test>\r\n"
            'Content-Type: text/plain; charset="x-no-such-charset"\r\n\r\nplain words \xe2\x9c\x93\r\n'
        )
        alice.send(odd.encode("latin-1"), to=bot.address)
        alice.receive()
        wait_answered(gateway, 2)
    said = _asked(fake_llm)
    assert "Hello there" in said[0] and "one" in said[0] and "two" in said[0] and "<" not in said[0]
    assert said[1] == "(subject: odd)\n\nplain words \u2713", "read as UTF-8"


def test_a_long_reply_arrives_whole_in_one_mail_with_its_code_block(
    tmp_path: Path, fake_llm: Any, mail_server: MailServer, alice: MailUser, bot: MailUser
) -> None:
    code = "\n".join(f"line_{n} = {n}" for n in range(2000))
    fake_llm.load([{"text": f"Here:\n\n```python\n{code}\n```\n\nDone."}])
    with Running(_settings(tmp_path, fake_llm.url, mail_server, bot, alice.address)) as gateway:
        _online(gateway)
        alice.write(bot.address, "code", "write it all")
        (reply,) = alice.receive()
        wait_answered(gateway, 1)
    assert code in text_of(reply) and text_of(reply).endswith("Done.\n")
    assert f'<code class="language-python">{code}\n</code>' in text_of(reply, "html")


def test_a_wrong_password_is_refused_and_plain_text_only_on_loopback(
    tmp_path: Path, mail_server: MailServer, bot: MailUser
) -> None:
    config = _config(mail_server, bot, [], password="wrong")
    store = GatewayStore(f"sqlite:///{tmp_path / 'hermetic.db'}")
    try:
        with pytest.raises(AdapterError, match="refused the login"):
            asyncio.run(EmailAdapter(EmailSettings.model_validate(config), store).connect())
    finally:
        store.close()
    with pytest.raises(ValueError, match="imap_security: none sends the password in clear"):
        EmailSettings.model_validate(config | {"imap_host": "mail.example.org"})


def test_a_dropped_connection_reconnects_and_one_gateway_per_mailbox(
    tmp_path: Path, fake_llm: Any, mail_server: MailServer, alice: MailUser, bot: MailUser
) -> None:
    fake_llm.load([{"text": "still here"}])
    settings = _settings(tmp_path, fake_llm.url, mail_server, bot, alice.address)
    with Running(settings) as gateway:
        _online(gateway)
        other = create_gateway(settings)
        try:
            with pytest.raises(GatewayLocked, match="one gateway per bot token"):
                asyncio.run(other.start())
        finally:
            other.agent.close()
            other.store.close()
        mail_server.kick(bot.address)  # Dovecot ends the bot's IMAP session
        alice.write(bot.address, "after", "did you drop?")
        (reply,) = alice.receive()
        wait_answered(gateway, 1)
        assert any("closed the connection" in error for error in gateway.status["email"].errors)
    assert text_of(reply) == "still here\n"


def test_a_kill_9_mid_turn_and_a_mail_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, mail_server: MailServer, alice: MailUser, bot: MailUser
) -> None:

    from gateway_process import SCRIPT, gateway_profile, kill_9_while_replying, restarted, wait_all_answered

    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    env = gateway_profile(tmp_path, fake_llm.url, "email", _config(mail_server, bot, [alice.address]))

    def ask() -> None:  # once the gateway is in: the mark it sets then is where its reading starts
        store = GatewayStore(f"sqlite:///{tmp_path / 'hermetic.db'}")
        try:
            wait_for(lambda: '"connected"' in (store.get_state("status:email") or ""))
        finally:
            store.close()
        alice.write(bot.address, "one", "question one")

    # killed while the turn runs: its reply is not out yet
    kill_9_while_replying(env, ask, lambda: fake_llm.wait_requests(1))
    alice.write(bot.address, "two", "question two")  # kept in the mailbox while no gateway runs
    with restarted(env) as again:
        replies = alice.receive(2)
        wait_all_answered(tmp_path, "email")
    assert len(fake_llm.requests) == 3, f"the cut-off turn ran again once, the next mail once: {again.errors}"
    assert sorted(text_of(reply).strip() for reply in replies) == ["answer one", "answer two"]
    assert {str(reply["Subject"]) for reply in replies} == {"Re: one", "Re: two"}
    assert len(alice.inbox()) == 2, "nothing was sent twice"
