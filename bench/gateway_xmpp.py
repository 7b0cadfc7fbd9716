"""The XMPP rows of `python -m bench.gateway`: the gateway's slixmpp client on a real Prosody
(tests/support/prosody.py) with the scripted model, people as slixmpp clients: time from a person's message
leaving their client to the agent's first model request, and N chats x M messages at once (each person
sends the next when the last answer is in), answered in full (the reply streamed as corrections)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from prosody import Prosody, XmppUser, xmpp_config  # kept with the tests (bench/__init__)

from control_plane.config.settings import load_settings
from control_plane.gateway import create_gateway
from control_plane.models.fake_llm import FakeLLM

from .gateway import REPLY, at_once, serving, throughput
from .gateway_irc import _answered
from .stats import Results

BOT = "benchbot"


def _settings(root: Path, llm: FakeLLM, server: Prosody, users: list[str]) -> Any:
    xmpp = xmpp_config(server, server.register(BOT), allow_users=users)
    model = {"name": "openai/scripted", "api_base": llm.url, "api_key": "bench", "retries": 0}
    return load_settings(
        root=root, model=model, backend="local", learning={"enabled": False}, gateway={"xmpp": xmpp}
    )


def collect(chats: int, messages: int, singles: int) -> Results:
    server = Prosody()
    users: list[XmppUser] = []
    with tempfile.TemporaryDirectory(prefix="hm-bench-xmpp-") as tmp, FakeLLM() as llm:
        llm.load([{"text": REPLY}] * (singles + chats * messages + 10))
        try:
            users = [XmppUser(server, f"user{n}") for n in range(chats)]
            bot = f"{BOT}@{users[0].jid.split('@')[1]}"
            settings = _settings(Path(tmp), llm, server, [user.jid for user in users])
            with serving(create_gateway(settings)) as answers:
                first = users[0]
                first.say(bot, "warm up")  # the first turn pays one-time imports: not sampled
                _answered(answers, first.jid, 1)
                to_model: list[float] = []
                for n in range(2, singles + 2):
                    sent = time.perf_counter()
                    first.say(bot, f"question {n}")
                    _answered(answers, first.jid, n)
                    to_model.append(llm.timeline[-1][0] - sent)

                def chat(user: XmppUser) -> list[float]:
                    start = singles + 1 if user is first else 0
                    latencies = []
                    for k in range(1, messages + 1):
                        sent = time.perf_counter()
                        user.say(bot, f"message {k}")
                        _answered(answers, user.jid, start + k)
                        latencies.append(time.perf_counter() - sent)
                    return latencies

                latencies, took = at_once(users, chat)
        finally:
            for user in users:
                user.close()
            server.close()
    return {
        "gateway xmpp: message -> first model request": to_model,
        f"gateway xmpp: {chats} chats x {messages} messages, message -> answered": throughput(
            latencies, took
        ),
    }
