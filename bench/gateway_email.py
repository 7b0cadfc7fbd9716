"""The email rows of `python -m bench.gateway`: the gateway's aioimaplib (IDLE) and aiosmtplib clients on a
real Postfix and Dovecot (tests/support/mailserver.py) with the scripted model, people sending with
aiosmtplib: time from a person's mail being handed to Postfix to the agent's first model request (Postfix to
LMTP to Dovecot, IDLE's wake-up, the fetch and the store included), and N people x M mails at once (each
writes the next, in the same thread, when the last is answered: its reply handed to Postfix)."""

from __future__ import annotations

import asyncio
import email.utils
import tempfile
import time
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import aioimaplib
from mailserver import (
    DOMAIN,
    PASSWORD,
    MailServer,
    MailUser,
    email_config,
)  # kept with the tests (bench/__init__)

from control_plane.config.settings import load_settings
from control_plane.gateway import create_gateway
from control_plane.models.fake_llm import FakeLLM

from .gateway import REPLY, at_once, serving, throughput
from .gateway_irc import _answered
from .stats import Results


def _settings(root: Path, llm: FakeLLM, server: MailServer, bot: str, users: list[str]) -> Any:
    mail = email_config(server, bot, allow_users=users)
    model = {"name": "openai/scripted", "api_base": llm.url, "api_key": "bench", "retries": 0}
    return load_settings(
        root=root, model=model, backend="local", learning={"enabled": False}, gateway={"email": mail}
    )


class _Writer:
    """One person's thread: the first mail starts it, each next one answers in it."""

    def __init__(self, user: MailUser, bot: str) -> None:
        self.user, self.bot, self.root = user, bot, email.utils.make_msgid(domain=DOMAIN)
        self.sent = 0

    def write(self, text: str) -> float:
        """Send the next mail; when it was handed over (perf_counter)."""
        message = EmailMessage()
        message["To"], message["Subject"] = self.bot, "bench" if not self.sent else "Re: bench"
        message["Message-ID"] = self.root if not self.sent else email.utils.make_msgid(domain=DOMAIN)
        if self.sent:
            message["In-Reply-To"] = message["References"] = self.root
        message.set_content(text)
        self.sent += 1
        started = time.perf_counter()
        self.user.send(message)
        return started


def _bare_idle(server: MailServer, sender: MailUser, singles: int) -> list[float]:
    """Mail handed to Postfix -> Dovecot's EXISTS in IDLE, for a bare aioimaplib client: the floor
    under the gateway's figure (Dovecot waits 500 ms after a mailbox changes before it tells, its
    NOTIFY_DELAY_MSECS)."""
    reader = MailUser(server, "idlereader")

    async def measure() -> list[float]:
        imap = aioimaplib.IMAP4("127.0.0.1", server.imap_port)
        await imap.wait_hello_from_server()
        await imap.login(reader.address, PASSWORD)
        await imap.select()
        waits = []
        for n in range(singles):
            idle = await imap.idle_start(timeout=60)
            started = time.perf_counter()
            await asyncio.to_thread(sender.write, reader.address, "idle", f"mail {n}")
            while not any(b"EXISTS" in bytes(line) for line in await imap.wait_server_push(60)):
                pass
            waits.append(time.perf_counter() - started)
            imap.idle_done()
            await asyncio.wait_for(idle, 10)
        await imap.logout()
        return waits

    return asyncio.run(measure())


def collect(chats: int, messages: int, singles: int) -> Results:
    server = MailServer()
    with tempfile.TemporaryDirectory(prefix="hm-bench-email-") as tmp, FakeLLM() as llm:
        llm.load([{"text": REPLY}] * (singles + chats * messages + 10))
        try:
            bot = server.add_user("benchbot")
            writers = [_Writer(MailUser(server, f"user{n}"), bot) for n in range(chats)]
            names = [writer.user.address for writer in writers]
            gateway = create_gateway(_settings(Path(tmp), llm, server, bot, names))
            with serving(gateway) as answers:
                deadline = time.monotonic() + 60
                while gateway.status["email"].state != "connected":  # its mark is set: mail from now on
                    assert time.monotonic() < deadline, gateway.status["email"].errors
                    time.sleep(0.02)
                first = writers[0]
                first.write("warm up")  # the first turn pays one-time imports: not sampled
                _answered(answers, first.user.address, 1)
                to_model: list[float] = []
                for n in range(2, singles + 2):
                    sent = first.write(f"question {n}")
                    _answered(answers, first.user.address, n)
                    to_model.append(llm.timeline[-1][0] - sent)

                def chat(writer: _Writer) -> list[float]:
                    start = singles + 1 if writer is first else 0
                    latencies = []
                    for k in range(1, messages + 1):
                        sent = writer.write(f"message {k}")
                        _answered(answers, writer.user.address, start + k)
                        latencies.append(time.perf_counter() - sent)
                    return latencies

                latencies, took = at_once(writers, chat)
            floor = _bare_idle(server, writers[0].user, singles)
        finally:
            server.close()
    return {
        "email: mail handed to Postfix -> Dovecot's EXISTS in IDLE (bare aioimaplib)": floor,
        "gateway email: mail handed to Postfix -> first model request": to_model,
        f"gateway email: {chats} people x {messages} mails, mail -> reply handed to Postfix": throughput(
            latencies, took
        ),
    }
