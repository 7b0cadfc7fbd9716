"""The IRC rows of `python -m bench.gateway`: the gateway's pydle client on a real ngIRCd
(tests/support/ngircd.py) with the scripted model, people as plain-socket clients: time from a PRIVMSG
leaving a person's socket to the agent's first model request, and N chats x M messages at once (each person
sends the next when the last answer is in), answered in full. The bot's flood pacing is set to 20 lines/s;
ngIRCd's own penalty throttling of each client's reading applies on top."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from ngircd import IrcUser, Ngircd, irc_config  # kept with the tests (bench/__init__)

from control_plane.config.settings import load_settings
from control_plane.gateway import create_gateway
from control_plane.models.fake_llm import FakeLLM

from .gateway import REPLY, Answers, at_once, serving, throughput
from .stats import Results


def _settings(root: Path, llm: FakeLLM, server: Ngircd, users: list[str]) -> Any:
    irc = irc_config(server, nick="benchbot", allow_users=users, flood_burst=5, flood_interval=0.05)
    model = {"name": "openai/scripted", "api_base": llm.url, "api_key": "bench", "retries": 0}
    return load_settings(
        root=root, model=model, backend="local", learning={"enabled": False}, gateway={"irc": irc}
    )


def _answered(answers: Answers, chat: str, count: int) -> None:
    with answers.changed:
        if not answers.changed.wait_for(lambda: answers.done[chat] >= count, timeout=120):
            raise TimeoutError(f"{chat}: {count} answers never came")


def collect(chats: int, messages: int, singles: int) -> Results:
    server = Ngircd()
    names = [f"user{n}" for n in range(chats)]
    users: list[IrcUser] = []
    with tempfile.TemporaryDirectory(prefix="hm-bench-irc-") as tmp, FakeLLM() as llm:
        llm.load([{"text": REPLY}] * (singles + chats * messages + 10))
        try:
            users = [IrcUser(server, name) for name in names]
            with serving(create_gateway(_settings(Path(tmp), llm, server, names))) as answers:
                first = users[0]
                first.wait_online("benchbot")
                first.say("benchbot", "warm up")  # the first turn pays one-time imports: not sampled
                _answered(answers, first.nick, 1)
                to_model: list[float] = []
                for n in range(2, singles + 2):
                    sent = time.perf_counter()
                    first.say("benchbot", f"question {n}")
                    _answered(answers, first.nick, n)
                    to_model.append(llm.timeline[-1][0] - sent)

                def chat(user: IrcUser) -> list[float]:
                    start = singles + 1 if user is first else 0
                    latencies = []
                    for k in range(1, messages + 1):
                        sent = time.perf_counter()
                        user.say("benchbot", f"message {k}")
                        _answered(answers, user.nick, start + k)
                        latencies.append(time.perf_counter() - sent)
                    return latencies

                latencies, took = at_once(users, chat)
        finally:
            for user in users:
                user.close()
            server.close()
    return {
        "gateway irc: PRIVMSG -> first model request": to_model,
        f"gateway irc: {chats} chats x {messages} messages, PRIVMSG -> answered": throughput(latencies, took),
    }
