"""A gateway run as a subprocess (`hermetic gateway run`): its profile, kill -9 mid-reply, answered once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from gateway_harness import OWNER
from telegram_standin import TOKEN, TelegramStandin

from control_plane.gateway.records import GatewayStore

SCRIPT = [
    {"text": "a slow reply that is cut off by the kill " * 5, "pace": 0.3},
    {"text": "answer one"},
    {"text": "answer two"},
]


def gateway_profile(root: Path, llm_url: str, platform: str, config: dict[str, Any]) -> dict[str, str]:
    """A profile whose config.yaml configures one platform; the environment to run the gateway with."""
    settings = {
        "model": {"name": "openai/scripted", "api_base": llm_url, "api_key": "test", "retries": 0},
        "backend": "local",
        "learning": {"enabled": False},
        "gateway": {"lock_ttl": 30, platform: {"edit_interval": 0.05, **config}},
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.yaml").write_text(yaml.safe_dump(settings))
    return {**os.environ, "HERMETIC_ROOT": str(root)}


def start_gateway(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "control_plane", "gateway", "run"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@dataclass
class GatewayRun:
    proc: subprocess.Popen[str]
    errors: str = ""
    """What the process said on stderr, once it ended."""


@contextmanager
def restarted(env: dict[str, str]) -> Iterator[GatewayRun]:
    """`with restarted(env) as run:` a gateway process for the block, then Ctrl-C, which must stop it
    cleanly; its stderr is in `run.errors` after the block (and printed, which pytest shows on failure)."""
    run = GatewayRun(start_gateway(env))
    try:
        yield run
        run.proc.send_signal(signal.SIGINT)
        assert run.proc.wait(30) == 0, "Ctrl-C stops the gateway cleanly"
    finally:
        run.proc.kill()
        _, run.errors = run.proc.communicate(timeout=10)
        print(run.errors[-3000:])


def kill_9_while_replying(
    env: dict[str, str], ask: Callable[[], object], replying: Callable[[], Any]
) -> None:
    first = start_gateway(env)
    try:
        ask()
        replying()  # the reply is out and being edited
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
        first.wait(10)


def answered_once_after_restart(
    env: dict[str, str],
    platform: str,
    bot_texts: Callable[[], list[str]],
    wait_for: Callable[..., Any],
    fake_llm: Any,
) -> None:
    with restarted(env) as again:
        # the message sent meanwhile is answered on its own or, arriving while the rerun runs, steers it
        # bounds of a loaded machine: the restart pays the gateway's imports and the first litellm one
        wait_for(lambda: {"answer one", "answer two"} <= set("\n".join(bot_texts()).split("\n")), timeout=180)
        wait_all_answered(Path(env["HERMETIC_ROOT"]), platform)  # marked once the last edit is out
    assert len(fake_llm.requests) == 3, (
        f"the cut-off turn ran again once, the other message once: {again.errors}"
    )
    texts = bot_texts()
    assert texts[0].startswith("answer one"), "the rerun edited the reply the killed run had begun"
    assert not any("slow reply" in t for t in texts)
    joined = "\n".join(texts)
    assert joined.count("answer one") == 1 and joined.count("answer two") == 1


def wait_all_answered(root: Path, platform: str, timeout: float = 120) -> None:
    store = GatewayStore(f"sqlite:///{root / 'hermetic.db'}")
    deadline = time.monotonic() + timeout
    try:
        while left := store.unanswered(platform):
            assert time.monotonic() < deadline, f"still unanswered: {left}"
            time.sleep(0.05)
    finally:
        store.close()


def write_config(root: Path, llm_url: str, standin: TelegramStandin, **gateway: Any) -> dict[str, str]:
    """A profile whose config.yaml names the token as ${TG_TOKEN}; the environment to run it with."""
    config = {
        "model": {"name": "openai/scripted", "api_base": llm_url, "api_key": "test", "retries": 0},
        "backend": "local",
        "learning": {"enabled": False},
        "gateway": {
            "lock_ttl": 30,
            **gateway,
            "telegram": {
                "token": "${TG_TOKEN}",
                "base_url": standin.base_url,
                "base_file_url": standin.base_file_url,
                "allow_users": [str(OWNER)],
                "edit_interval": 0.05,
                "poll_timeout": 2,
            },
        },
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    return {**os.environ, "HERMETIC_ROOT": str(root), "TG_TOKEN": TOKEN}


def create_lock_name() -> str:
    import hashlib

    return "telegram:" + hashlib.sha256(TOKEN.encode()).hexdigest()[:16]
