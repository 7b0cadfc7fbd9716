"""The far side of a gateway bench: a platform's stand-in and the scripted model, either in a process of
their own (as a deployment has the platform and the model: elsewhere), driven through a multiprocessing
manager, or in the bench's own process (threads beside the gateway, sharing its interpreter and GIL).

The bench compares time stamps taken on both sides, so both read CLOCK_MONOTONIC: one clock for every
process of the machine.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.managers import BaseManager
from typing import Any

from dingtalk_standin import DingTalkStandin
from feishu_standin import FeishuStandin
from mattermost_standin import TOKEN as MM_TOKEN  # the suite's stand-ins (bench/__init__)
from mattermost_standin import MattermostStandin
from ngircd import free_port
from standin_server import wait_listening
from teams_standin import TeamsStandin
from telegram_standin import TOKEN as TG_TOKEN
from telegram_standin import TelegramStandin
from wecom_bot_standin import WeComBotStandin
from wecom_standin import WeComStandin
from whatsapp_standin import WhatsAppStandin

from control_plane.models.fake_llm import FakeLLM


def now() -> float:
    """Seconds on the machine's monotonic clock (the same in every process)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class TimedLLM(FakeLLM):
    """The scripted model, noting when each request arrived (by its number, as `requests` holds them)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: dict[int, float] = {}

    def _next(self, body: dict[str, Any]) -> tuple[int, Any]:
        at = now()
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
    "wecom_bot": Platform(
        start=WeComBotStandin,
        config=lambda s, users: s.gateway_config(free_port(), users),
        ready=lambda s: wait_listening(int(s.callback_url.split(":")[2].split("/")[0])),
        say=lambda s, n, text: s.says(f"u{n}", text),
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


class FarSide:
    """One platform's stand-in and the scripted model with `replies` answers, listening. Every method
    takes and returns plain data, so a manager's proxy can stand for it in another process."""

    def __init__(self, name: str, replies: int, reply: str) -> None:
        self.platform: Platform = PLATFORMS[name]
        self.llm = TimedLLM()
        self.llm.start()
        self.llm.load([{"text": reply}] * replies)
        self.standin = self.platform.start()

    def model(self) -> dict[str, Any]:
        """The gateway's model settings for the scripted model."""
        return {"name": "openai/scripted", "api_base": self.llm.url, "api_key": "bench", "retries": 0}

    def config(self, users: list[str]) -> dict[str, Any]:
        return self.platform.config(self.standin, users)

    def ready(self) -> None:
        self.platform.ready(self.standin)

    def say(self, chat: int, text: str) -> None:
        self.platform.say(self.standin, chat, text)

    def to_model(self, sent: dict[str, float]) -> list[float]:
        return self.llm.to_model(sent)

    def close(self) -> None:
        self.standin.close()
        self.llm.stop()


class _Host(BaseManager):
    """The process the far side runs in (spawned: no copy of the bench's threads or loops)."""


_Host.register("FarSide", FarSide)


@contextlib.contextmanager
def far_side(name: str, replies: int, reply: str, *, own_process: bool) -> Iterator[FarSide]:
    """The far side for platform `name`: in a process of its own, or in this one."""
    if not own_process:
        side = FarSide(name, replies, reply)
        try:
            yield side
        finally:
            side.close()
        return
    with _Host(ctx=multiprocessing.get_context("spawn")) as host:
        proxy = host.FarSide(name, replies, reply)  # type: ignore[attr-defined]
        try:
            yield proxy
        finally:
            proxy.close()
