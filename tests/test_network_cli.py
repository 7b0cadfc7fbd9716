"""The network from the terminal: presets, a run that asks for a refused host at the prompt, the audit log.

`hermetic run` is a subprocess (its own egress proxy); the upstream is an HTTP server on this test's
loopback, which the sandbox reaches only through the proxy once the user said yes.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import get_backend

from backends.network import NET_ROOT


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = b"hello from the host\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def web() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def hermetic(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "control_plane", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


@pytest.fixture
def env(tmp_path: Path, fake_llm: Any) -> dict[str, str]:
    get_backend("local")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    return {
        **clean,
        "HERMETIC_ROOT": str(tmp_path),
        "HERMETIC_MODEL__NAME": "openai/scripted",
        "HERMETIC_MODEL__API_BASE": fake_llm.url,
        "HERMETIC_MODEL__API_KEY": "test-key-abcdef",
        "HERMETIC_MODEL__RETRIES": "0",
        "HERMETIC_BACKEND": "local",
        "HERMETIC_SANDBOX__NETWORK": "allowlist",
        "HERMETIC_TOOLSETS": "terminal,network",
        "COLUMNS": "200",
    }


def _script(port: int) -> list[dict[str, Any]]:
    fetch = f"curl -sS --noproxy '' -x \"$http_proxy\" http://127.0.0.1:{port}/"
    ask = {"host": "127.0.0.1", "port": port, "reason": "to fetch the greeting"}
    return [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": fetch}}]},
        {"tool_calls": [{"name": "network_request", "arguments": ask}]},
        {"tool_calls": [{"name": "terminal", "arguments": {"command": fetch}}]},
        {"text": "fetched"},
    ]


def _tool_results(fake_llm: Any) -> list[str]:
    return [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]


def test_a_refused_host_is_asked_for_at_the_prompt_and_allowed_once(
    env: dict[str, str], fake_llm: Any, web: int
) -> None:
    fake_llm.load(_script(web))
    done = hermetic("run", "fetch the greeting", env=env, stdin="once\n")
    assert done.returncode == 0, done.stderr
    assert f"The agent asks to reach 127.0.0.1:{web}: to fetch the greeting [once/always/no]" in done.stderr
    refused, granted, fetched = _tool_results(fake_llm)
    assert (
        f"egress refused: 127.0.0.1:{web}: an IP address is refused unless a CIDR rule covers it" in refused
    )
    assert f"an operator allows it by adding `127.0.0.1/32:{web}` to sandbox.allow" in refused
    assert granted == f"127.0.0.1:{web} is allowed for this sandbox now"
    assert "hello from the host" in fetched
    assert not (Path(env["HERMETIC_ROOT"]) / "config.yaml").exists(), "once is not remembered"

    sandbox_id = _sandbox_that_reached(web)
    shown = hermetic("sandbox", "egress", sandbox_id, "--json", env=env)
    decisions = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [d["allowed"] for d in decisions] == [False, True]
    assert decisions[0]["denied"] == "ip-literal" and decisions[1]["bytes_down"] > 0
    table = hermetic("sandbox", "egress", sandbox_id, env=env)
    assert "denied (ip-literal)" in table.stdout and "allowed 127.0.0.1" in table.stdout


def test_always_adds_the_host_to_the_profile_and_end_of_input_is_no(
    env: dict[str, str], fake_llm: Any, web: int
) -> None:
    fake_llm.load(_script(web))
    assert hermetic("run", "fetch", env=env, stdin="sometimes\nalways\n").returncode == 0
    config = yaml.safe_load((Path(env["HERMETIC_ROOT"]) / "config.yaml").read_text())
    assert config == {"sandbox": {"allow": [f"127.0.0.1:{web}"]}}
    assert "hello from the host" in _tool_results(fake_llm)[2]

    fake_llm.load(_script(web))
    no_answer = hermetic("run", "fetch", env={**env, "HERMETIC_SANDBOX__ALLOW": "[]"}, stdin="")
    assert no_answer.returncode == 0, no_answer.stderr
    results = _tool_results(fake_llm)
    assert results[1] == f"the user did not allow 127.0.0.1:{web}; do without it"
    assert "hello from the host" not in results[2]


def test_chat_asks_at_its_prompt_between_messages(env: dict[str, str], fake_llm: Any, web: int) -> None:
    fake_llm.load(_script(web))
    done = hermetic("chat", env=env, stdin="fetch the greeting\nonce\n/exit\n")
    assert done.returncode == 0, done.stderr
    assert f"The agent asks to reach 127.0.0.1:{web}" in done.stderr
    assert "hello from the host" in _tool_results(fake_llm)[2]


def test_presets_are_listed() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "control_plane", "network", "presets"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "@python" in done.stdout and "files.pythonhosted.org" in done.stdout


def _sandbox_that_reached(port: int) -> str:
    for log in sorted(NET_ROOT.glob("*/egress.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True):
        if any(e.get("port") == port for e in map(json.loads, log.read_text().splitlines())):
            return log.parent.name
    raise AssertionError(f"no egress log mentions port {port}")
