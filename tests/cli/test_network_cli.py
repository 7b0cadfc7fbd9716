"""The network from the terminal: presets, a run that asks for a refused host at the prompt, the audit log.

`hermetic run` is a subprocess (its own egress proxy); the upstream is an HTTP server on this test's
loopback, which the sandbox reaches only through the proxy once the user said yes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest
import yaml
from conftest import get_backend
from hermetic_cli import hermetic, scripted_env
from network_kit import fetch_script

from backends.network import NET_ROOT, sandbox_of


@pytest.fixture
def env(tmp_path: Path, fake_llm: Any) -> dict[str, str]:
    get_backend("local")
    return scripted_env(
        tmp_path, fake_llm.url, HERMETIC_SANDBOX__NETWORK="allowlist", HERMETIC_TOOLSETS="terminal,network"
    )


def _tool_results(fake_llm: Any) -> list[str]:
    return [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]


def terminal(*args: str, env: dict[str, str]) -> pexpect.spawn:
    """`hermetic ARGS` on a pseudo-terminal, as a user runs it (questions are answered on a terminal)."""
    return pexpect.spawn(
        sys.executable,
        ["-m", "control_plane", *args],
        env=env,
        encoding="utf-8",
        timeout=180,
        dimensions=(50, 250),
        use_poll=True,  # select() fails on a descriptor above 1024, which a long suite reaches
    )


def test_a_refused_host_is_asked_for_at_the_prompt_and_allowed_once(
    env: dict[str, str], fake_llm: Any, web: int
) -> None:
    fake_llm.load(fetch_script(web))
    run = terminal("run", "fetch the greeting", env=env)
    run.expect_exact(f"The agent asks to reach 127.0.0.1:{web}: to fetch the greeting")
    run.expect_exact("[1] once  [2] always  [3] no")
    run.sendline("once")
    run.expect(pexpect.EOF)
    run.close()
    assert run.exitstatus == 0, run.before
    refused, granted, fetched = _tool_results(fake_llm)
    assert (
        f"egress refused: 127.0.0.1:{web}: an IP address is refused unless a CIDR rule covers it" in refused
    )
    assert f"an operator allows it by adding `127.0.0.1/32:{web}` to sandbox.allow" in refused
    assert granted == f"127.0.0.1:{web} is allowed for this sandbox now"
    assert "hello from the host" in fetched
    assert not (Path(env["HERMETIC_ROOT"]) / "config.yaml").exists(), "once is not remembered"

    sandbox_id = _sandbox_that_reached(web)
    shown = hermetic("sandbox", "egress", sandbox_id, "--json", env=env, stdin="")
    decisions = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [d["allowed"] for d in decisions] == [False, True]
    assert decisions[0]["denied"] == "ip-literal" and decisions[1]["bytes_down"] > 0
    table = hermetic("sandbox", "egress", sandbox_id, env=env, stdin="")
    assert "denied (ip-literal)" in table.stdout and "allowed 127.0.0.1" in table.stdout


def test_always_adds_the_host_to_the_profile_and_no_terminal_is_no(
    env: dict[str, str], fake_llm: Any, web: int
) -> None:
    config = Path(env["HERMETIC_ROOT"]) / "config.yaml"
    config.write_text("# the operator's own note, kept\nsandbox:\n  memory: 1g\n")
    fake_llm.load(fetch_script(web))
    run = terminal("run", "fetch", env=env)
    run.expect_exact(f"The agent asks to reach 127.0.0.1:{web}")
    run.sendline("sometimes")
    run.expect_exact("answer one of: once, always, no")
    run.sendline("2")  # a choice by its number
    run.expect(pexpect.EOF)
    run.close()
    assert run.exitstatus == 0, run.before
    assert "# the operator's own note, kept" in config.read_text()
    assert yaml.safe_load(config.read_text()) == {"sandbox": {"memory": "1g", "allow": [f"127.0.0.1:{web}"]}}
    assert "hello from the host" in _tool_results(fake_llm)[2]

    fake_llm.load(fetch_script(web))
    piped = hermetic("run", "fetch", env={**env, "HERMETIC_SANDBOX__ALLOW": "[]"}, stdin="once\n")
    assert piped.returncode == 0, piped.stderr
    results = _tool_results(fake_llm)
    assert results[1] == f"the user did not allow 127.0.0.1:{web}; do without it"
    assert "hello from the host" not in results[2]


def test_chat_asks_for_a_host_between_messages(env: dict[str, str], fake_llm: Any, web: int) -> None:
    fake_llm.load(fetch_script(web))
    chat = terminal("chat", env=env)
    chat.expect_exact("›")
    chat.sendline("fetch the greeting")
    chat.expect_exact(f"The agent asks to reach 127.0.0.1:{web}")
    chat.sendline("once")
    chat.expect_exact("fetched")
    chat.sendline("/exit")
    chat.expect(pexpect.EOF)
    assert "hello from the host" in _tool_results(fake_llm)[2]


def test_presets_are_listed() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "control_plane", "network", "presets"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "@python" in done.stdout and "files.pythonhosted.org" in done.stdout


def _sandbox_that_reached(port: int) -> str:
    for log in sorted(NET_ROOT.glob("*/egress.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True):
        if any(e.get("port") == port for e in map(json.loads, log.read_text().splitlines())):
            return sandbox_of(log.parent)
    raise AssertionError(f"no egress log mentions port {port}")
