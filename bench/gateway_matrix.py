"""The Matrix rows of `python -m bench.gateway` (alone: `python -m bench.gateway_matrix [--chats ...]`): the
gateway's matrix-nio client on a real Synapse (tests/support/synapse_server.py) with the scripted model,
people as client-server API clients, each in a direct chat (a room of two) with the bot. The time from a
person's message leaving their client to the agent's first model request (and, for scale, to Synapse's
answer to that send), one chat one message at a time and N chats x M messages at once (each person sends
the next when the last answer is in), and those messages answered in full (the reply streamed as edits)
per second."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from ngircd import wait_for
from synapse_server import MatrixUser, Synapse, matrix_config  # kept with the tests (bench/__init__)

from control_plane.config.settings import load_settings
from control_plane.gateway import create_gateway

from . import gateway
from .far_side import TimedLLM, now
from .gateway import REPLY, at_once, serving, throughput
from .gateway_irc import _answered
from .stats import Results

BOT = "benchbot"


def _settings(root: Path, llm: TimedLLM, server: Synapse, bot: str, users: list[str]) -> Any:
    matrix = matrix_config(server, bot, allow_users=users)
    model = {"name": "openai/scripted", "api_base": llm.url, "api_key": "bench", "retries": 0}
    return load_settings(
        root=root, model=model, backend="local", learning={"enabled": False}, gateway={"matrix": matrix}
    )


def collect(chats: int, messages: int, singles: int) -> Results:
    server = Synapse()
    users: list[MatrixUser] = []
    llm = TimedLLM()
    with tempfile.TemporaryDirectory(prefix="hm-bench-matrix-") as tmp, llm:
        llm.load([{"text": REPLY}] * (singles + chats * messages + 10))
        try:
            bot = server.register(BOT)
            users = [MatrixUser(server, f"user{n}") for n in range(chats)]
            agent = create_gateway(_settings(Path(tmp), llm, server, bot, [user.user_id for user in users]))
            with serving(agent) as answers:
                wait_for(lambda: agent.status["matrix"].state == "connected")
                rooms = {user.user_id: user.create_room([bot]) for user in users}
                for user in users:
                    user.hear(rooms[user.user_id], type="m.room.member", sender=bot)  # the bot joined
                first, room = users[0], rooms[users[0].user_id]
                first.say(room, "warm up")  # the first turn pays one-time imports: not sampled
                _answered(answers, room, 1)
                alone: dict[str, float] = {}
                accepted = []  # Synapse's own share: its answer to the person's send
                for n in range(2, singles + 2):
                    alone[f"question {n}"] = sent = now()  # the clock TimedLLM stamps arrivals by
                    first.say(room, f"question {n}")
                    accepted.append(now() - sent)
                    _answered(answers, room, n)
                together: dict[str, float] = {}

                def chat(user: MatrixUser) -> list[float]:
                    start = singles + 1 if user is first else 0
                    latencies = []
                    for k in range(1, messages + 1):
                        text = f"{user.user_id} message {k}"
                        together[text] = sent = now()
                        user.say(rooms[user.user_id], text)
                        _answered(answers, rooms[user.user_id], start + k)
                        latencies.append(now() - sent)
                    return latencies

                latencies, took = at_once(users, chat)
        finally:
            for user in users:
                user.close()
            server.close()
    many = f"gateway matrix: {chats} chats x {messages} messages, message"
    return {
        "gateway matrix: a person's send answered by Synapse (for scale)": accepted,
        "gateway matrix: message -> first model request": llm.to_model(alone),
        f"{many} -> first model request": llm.to_model(together),
        f"{many} -> answered": throughput(latencies, took),
    }


if __name__ == "__main__":
    gateway.main(["--platform", "matrix", *sys.argv[1:]])
