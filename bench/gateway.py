"""`python -m bench.gateway [--platform all|telegram|office|irc|xmpp|matrix|email]`: the messaging gateway
over the Telegram stand-in (tests/standins/telegram_standin.py, python-telegram-bot as the client) with the
scripted model: time from an inbound update to the agent's first model request, from the model's last
token to the final edit, and N chats x M messages at once
(each chat sends its next message when the last answer is in): throughput and latency. The IRC rows,
against a real ngIRCd, are bench/gateway_irc.py's, the XMPP rows, against a real Prosody,
bench/gateway_xmpp.py's, the Matrix rows, against a real Synapse, bench/gateway_matrix.py's, the email
rows, against a real Postfix and Dovecot, bench/gateway_email.py's; the office platforms' rows
(bench/gateway_office.py) each run over its own stand-in, which with the scripted model runs in a process
of its own (`--in-process`: in the gateway's, sharing its interpreter). After the table: the 50 ms median /
100 ms p90 targets of the inbound -> model figures, and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import logging
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from telegram_standin import TOKEN, TelegramStandin  # the one stand-in, kept with the tests (bench/__init__)

from control_plane.config.settings import load_settings
from control_plane.gateway import Gateway, create_gateway
from control_plane.models.fake_llm import FakeLLM

from . import gateway_office
from .stats import Figure, Results, as_figure, cpu_noise, print_targets, report, summarize

T = TypeVar("T")
REAL_SERVERS = {
    "irc": "IRC on a real ngIRCd",
    "xmpp": "XMPP on a real Prosody",
    "matrix": "Matrix on a real Synapse",
    "email": "email on a real Postfix and Dovecot",
}
"""The platforms benchmarked against a real server, each by its module bench/gateway_<platform>.py."""
REPLY = "Here is the answer you asked for, written out over a few words, done."


def _settings(root: Path, llm: FakeLLM, standin: TelegramStandin, users: list[int]) -> Any:
    telegram = {
        "token": TOKEN,
        "base_url": standin.base_url,
        "base_file_url": standin.base_file_url,
        "allow_users": [str(u) for u in users],
        "poll_timeout": 10,
    }
    model = {"name": "openai/scripted", "api_base": llm.url, "api_key": "bench", "retries": 0}
    return load_settings(
        root=root, model=model, backend="local", learning={"enabled": False}, gateway={"telegram": telegram}
    )


class Answers:
    """Counts the answered messages per chat as the gateway marks them (the store's mark, wrapped), so a
    waiter wakes on the mark itself instead of polling the database."""

    def __init__(self, gateway: Gateway) -> None:
        self.done: Counter[str] = Counter()
        self.changed = threading.Condition()
        store, mark = gateway.store, gateway.store.mark

        def marked(inbound_id: int, **fields: Any) -> None:
            mark(inbound_id, **fields)
            if fields.get("state") == "answered":
                found = store.inbound(inbound_id)
                with self.changed:
                    self.done[found.chat if found else "?"] += 1
                    self.changed.notify_all()

        store.mark = marked  # type: ignore[method-assign]

    def wait(self, chat: int, count: int) -> None:
        with self.changed:
            if not self.changed.wait_for(lambda: self.done[str(chat)] >= count, timeout=120):
                raise TimeoutError(f"chat {chat}: {count} answers never came")


def _final(answers: Answers, standin: TelegramStandin, chat: int, count: int) -> float:
    """Wait until `count` messages of the chat are answered; the time of the last call that changed the
    chat (the final edit)."""
    answers.wait(chat, count)
    with standin._changed:
        changes = [
            at
            for (method, params), at in zip(standin.calls, standin.call_times, strict=True)
            if method in ("sendMessage", "editMessageText") and str(params.get("chat_id")) == str(chat)
        ]
    return changes[-1]


@contextlib.contextmanager
def serving(gateway: Gateway) -> Iterator[Answers]:
    """The gateway receiving on an event loop of its own thread until the block ends."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    answers = Answers(gateway)
    asyncio.run_coroutine_threadsafe(gateway.start(), loop).result(60)
    try:
        yield answers
    finally:
        asyncio.run_coroutine_threadsafe(gateway.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        gateway.agent.close()
        gateway.store.close()


def at_once(chats: Sequence[T], talk: Callable[[T], list[float]]) -> tuple[list[float], float]:
    """Each chat's `talk` in a thread of its own, all at once: every latency they return, and the
    seconds the whole took."""
    found: list[list[float]] = [[] for _ in chats]

    def run(n: int) -> None:
        found[n] = talk(chats[n])

    began = time.perf_counter()
    workers = [threading.Thread(target=run, args=(n,)) for n in range(len(chats))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return [latency for one in found for latency in one], time.perf_counter() - began


def throughput(latencies: list[float], took: float) -> Figure:
    """N chats x M messages at once: each answer's latency, and the messages answered per second."""
    rate = len(latencies) / took
    return Figure(latencies, note=f"{rate:.1f} messages/s", extra={"messages_per_s": rate})


def collect(chats: int, messages: int, singles: int) -> Results:
    users = [7000 + n for n in range(chats)]
    with tempfile.TemporaryDirectory(prefix="hm15-bench-") as tmp, FakeLLM() as llm:
        standin = TelegramStandin()
        llm.load([{"text": REPLY}] * (singles + chats * messages + 10))  # one turn per message
        try:
            with serving(create_gateway(_settings(Path(tmp), llm, standin, users))) as answers:
                standin.user_says(users[0], "warm up")  # the first turn pays one-time imports: not sampled
                _final(answers, standin, users[0], 1)
                to_model, to_edit = [], []
                for n in range(2, singles + 2):  # one chat, one message at a time
                    sent = time.perf_counter()
                    standin.user_says(users[0], f"question {n}")
                    edited = _final(answers, standin, users[0], n)
                    received, last_byte = llm.timeline[-1]
                    to_model.append(received - sent)
                    to_edit.append(edited - last_byte)

                def chat(user: int) -> list[float]:
                    start = singles + 1 if user == users[0] else 0
                    latencies = []
                    for k in range(1, messages + 1):
                        sent = time.perf_counter()
                        standin.user_says(user, f"message {k}")
                        latencies.append(_final(answers, standin, user, start + k) - sent)
                    return latencies

                latencies, took = at_once(users, chat)
        finally:
            standin.close()
    return {
        "gateway: update -> first model request": to_model,
        "gateway: last token -> final edit": to_edit,
        f"gateway: {chats} chats x {messages} messages, update -> answer": throughput(latencies, took),
    }


def to_model_targets(results: Results) -> list[tuple[str, str, bool]]:
    """Issues 35 and 36: an inbound message reaches the model within 50 ms median and 100 ms p90, for one
    chat at a time and for N chats at once."""
    checked = []
    for name, value in results.items():
        if "first model request" in name and (samples := as_figure(value).samples):
            s = summarize(samples)
            measured = f"{s['median_ms']:.1f} ms median, {s['p90_ms']:.1f} ms p90"
            checked.append(
                (
                    f"{name} <= 50 ms median, 100 ms p90",
                    measured,
                    bool(s["median_ms"] <= 50 and s["p90_ms"] <= 100),
                )
            )
    return checked


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--messages", type=int, default=5)
    parser.add_argument("-n", "--singles", type=int, default=30, help="one-chat samples for the first two")
    parser.add_argument("--platform", choices=["all", "telegram", "office", *REAL_SERVERS], default="all")
    parser.add_argument(
        "--office",
        type=lambda names: names.split(","),
        default=list(gateway_office.PLATFORMS),
        help=f"the office rows' platforms, comma-separated (default: {','.join(gateway_office.PLATFORMS)})",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="the office rows' stand-in and model in the gateway's process (default: a process of their own)",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    # Warnings only, as the CLI configures it: else wordllama's import-time basicConfig(INFO) would have
    # every client library log each event to stderr, a cost the served gateway does not pay
    logging.basicConfig(level=logging.WARNING)
    noise = cpu_noise()
    if args.platform in ("all", "telegram", "office"):
        results = collect(args.chats, args.messages, args.singles) if args.platform != "office" else {}
        if args.platform in ("all", "office"):
            results |= gateway_office.collect(
                args.chats, args.messages, args.office, own_process=not args.in_process
            )
        load = os.getloadavg()
        path = report(
            "gateway (Telegram and office stand-ins, scripted model)",
            results,
            args.out,
            {"section": "gateway", "loadavg": load},
        )
        print(
            f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1, 5, 15 min) on {os.cpu_count()} CPUs"
        )
        print_targets(to_model_targets(results), (noise, cpu_noise()), path)
    for platform, where in REAL_SERVERS.items():
        if args.platform in ("all", platform):
            rows = importlib.import_module(f".gateway_{platform}", __package__)
            results = rows.collect(args.chats, args.messages, args.singles)
            report(
                f"gateway ({where}, scripted model)", results, args.out, {"section": f"gateway-{platform}"}
            )


if __name__ == "__main__":
    main()
