"""The office platforms' rows of `python -m bench.gateway`: for each, the gateway with its real client
library against the suite's stand-in (tests/standins/*_standin.py) and the scripted model, N chats x M
messages at once (each chat sends its next message when the last answer is in): the time from the platform
receiving a user's message to the agent's first model request for it."""

from __future__ import annotations

import asyncio
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dingtalk_standin import DingTalkStandin
from feishu_standin import FeishuStandin
from mattermost_standin import TOKEN as MM_TOKEN  # the suite's stand-ins (bench/__init__)
from mattermost_standin import MattermostStandin
from teams_standin import TeamsStandin
from telegram_standin import TOKEN as TG_TOKEN
from telegram_standin import TelegramStandin
from wecom_standin import WeComStandin
from whatsapp_standin import WhatsAppStandin

from control_plane.config.settings import load_settings
from control_plane.gateway import create_gateway
from control_plane.models.fake_llm import FakeLLM

from .stats import Figure, Results

REPLY = "Here is the answer you asked for, written out over a few words, done."


class TimedLLM(FakeLLM):
    """The scripted model, noting when each request arrived (by its number, as `requests` holds them)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: dict[int, float] = {}

    def _next(self, body: dict[str, Any]) -> tuple[int, Any]:
        at = time.perf_counter()
        number, turn = super()._next(body)
        with self._lock:
            self.arrived[number] = at
        return number, turn

    def to_model(self, sent: dict[str, float]) -> list[float]:
        """Each text's seconds from `sent` to the first request whose last user message it is (requests
        of chats at once arrive in any order, so they are told apart by their text)."""
        latencies, waiting = [], dict(sent)
        for number, body in enumerate(self.requests, start=1):
            text = next((m["content"] for m in reversed(body["messages"]) if m["role"] == "user"), "")
            if text in waiting:
                latencies.append(self.arrived[number] - waiting.pop(text))
        return latencies


@dataclass
class Platform:
    """How the bench drives one platform's stand-in."""

    start: Callable[[], Any]
    """The stand-in, listening."""
    config: Callable[[Any, list[str]], dict[str, Any]]
    """(stand-in, user ids) -> the platform's gateway settings."""
    ready: Callable[[Any], Any]
    """Waits until the gateway is connected to the stand-in."""
    say: Callable[[Any, int, str], None]
    """(stand-in, chat number, text): that chat's user sends the text."""
    chat: Callable[[int], str]
    """A chat number as the gateway's chat id."""


PLATFORMS: dict[str, Platform] = {
    "telegram": Platform(  # the baseline the office platforms compare with
        start=TelegramStandin,
        config=lambda s, users: {
            "token": TG_TOKEN,
            "base_url": s.base_url,
            "base_file_url": s.base_file_url,
            "allow_users": [str(7000 + int(u[1:])) for u in users],
            "poll_timeout": 10,
        },
        ready=lambda s: None,  # updates wait in the stand-in until polled
        say=lambda s, n, text: s.user_says(7000 + n, text),
        chat=lambda n: str(7000 + n),
    ),
    "mattermost": Platform(
        start=MattermostStandin,
        config=lambda s, users: {"url": s.url, "token": MM_TOKEN, "allow_users": users, "actions_port": 0},
        ready=lambda s: s.wait_for(s.connected),
        say=lambda s, n, text: s.user_says(f"d{n}", text, user=f"u{n}"),
        chat=lambda n: f"d{n}",
    ),
    "whatsapp": Platform(
        start=WhatsAppStandin,
        config=lambda s, users: s.gateway_config([f"US.{u[1:]}" for u in users]),
        ready=lambda s: s.wait_listening(),
        say=lambda s, n, text: s.user_says(f"US.{n}", text),
        chat=lambda n: f"US.{n}",
    ),
    "wecom": Platform(
        start=WeComStandin,
        config=lambda s, users: s.gateway_config(users),
        ready=lambda s: s.wait_listening(),
        say=lambda s, n, text: s.user_says(f"u{n}", text),
        chat=lambda n: f"u{n}",
    ),
    "dingtalk": Platform(
        start=DingTalkStandin,
        config=lambda s, users: s.gateway_config([f"staff{u[1:]}" for u in users]),
        ready=lambda s: s.wait_for(lambda: s.connections),
        say=lambda s, n, text: s.user_says(f"staff{n}", text),
        chat=lambda n: f"staff{n}",
    ),
    "feishu": Platform(
        start=FeishuStandin,
        config=lambda s, users: s.gateway_config([f"ou_{u[1:]}" for u in users]),
        ready=lambda s: s.wait_for(lambda: s.connections),
        say=lambda s, n, text: s.user_says(f"ou_{n}", text),
        chat=lambda n: f"oc_p2p_ou_{n}",
    ),
    "teams": Platform(
        start=TeamsStandin,
        config=lambda s, users: s.gateway_config(users),
        ready=lambda s: s.wait_listening(),
        say=lambda s, n, text: s.user_says(f"u{n}", text),
        chat=lambda n: f"a:u{n}",
    ),
}


def _answered(gateway: Any) -> tuple[dict[str, int], threading.Condition]:
    """Answers counted per chat as the gateway marks them (the store's mark, wrapped)."""
    done: dict[str, int] = {}
    changed = threading.Condition()
    store, mark = gateway.store, gateway.store.mark

    def marked(inbound_id: int, **fields: Any) -> None:
        mark(inbound_id, **fields)
        if fields.get("state") == "answered":
            found = store.inbound(inbound_id)
            with changed:
                key = found.chat if found else "?"
                done[key] = done.get(key, 0) + 1
                changed.notify_all()

    store.mark = marked
    return done, changed


def collect_one(name: str, chats: int, messages: int) -> Figure:
    platform = PLATFORMS[name]
    users = [f"u{n}" for n in range(chats)]
    llm = TimedLLM()
    with tempfile.TemporaryDirectory(prefix=f"hm-bench-{name}-") as tmp, llm:
        standin = platform.start()
        llm.load([{"text": REPLY}] * (chats * messages + 5))
        model = {"name": "openai/scripted", "api_base": llm.url, "api_key": "bench", "retries": 0}
        settings = load_settings(
            root=Path(tmp), model=model, backend="local", learning={"enabled": False},
            gateway={name: platform.config(standin, users)},
        )  # fmt: skip
        gateway = create_gateway(settings)
        done, changed = _answered(gateway)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(gateway.start(), loop).result(60)
        sent: dict[str, float] = {}
        try:
            platform.ready(standin)

            def wait(chat: str, count: int) -> None:
                with changed:
                    if not changed.wait_for(lambda: done.get(chat, 0) >= count, timeout=120):
                        raise TimeoutError(f"{name} chat {chat}: {count} answers never came")

            platform.say(standin, 0, "warm up")  # the first turn pays one-time imports: not sampled
            wait(platform.chat(0), 1)

            def chat(n: int) -> None:
                for k in range(1, messages + 1):
                    text = f"chat {n} message {k}"
                    sent[text] = time.perf_counter()
                    platform.say(standin, n, text)
                    wait(platform.chat(n), k + (n == 0))

            workers = [threading.Thread(target=chat, args=(n,)) for n in range(chats)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        finally:
            asyncio.run_coroutine_threadsafe(gateway.stop(), loop).result(60)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            gateway.agent.close()
            gateway.store.close()
            standin.close()
    return Figure(llm.to_model(sent), note=f"{chats} chats x {messages} messages")


def collect(chats: int, messages: int) -> Results:
    return {
        f"gateway {name}: inbound -> first model request": collect_one(name, chats, messages)
        for name in PLATFORMS
    }
