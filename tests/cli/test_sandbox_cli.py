"""`hermetic sandbox watch ID PATH`, `hermetic sandbox stats ID` and `hermetic sandbox list` from another
process: sandboxes this test holds, reached through their ingress sockets (local with bubblewrap, docker),
their cgroups and their audit logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from conftest import get_backend

from backends import Sandbox, SandboxSpec


@pytest.fixture(params=["local", "docker"], scope="module")
def held(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    with get_backend(request.param).create(SandboxSpec(memory="256m", pids=64)) as sb:
        if sb.ingress is None:
            pytest.skip(f"{request.param}: this sandbox has no ingress socket (local needs bubblewrap)")
        yield sb


def _sandbox_cli(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    return subprocess.Popen(
        [sys.executable, "-m", "control_plane", "sandbox", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "COLUMNS": "200"},
    )


def _finished(*args: str) -> tuple[int, str]:
    proc = _sandbox_cli(*args)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out + err


def test_another_process_sees_the_sandbox_files_change(held: Sandbox) -> None:
    held.run("rm -rf cli-watch; mkdir cli-watch")
    proc = _sandbox_cli("watch", held.id, "cli-watch", "--json")
    assert proc.stdout is not None
    try:
        armed = json.loads(proc.stdout.readline())
        assert armed["watching"].endswith("/cli-watch")
        held.run("echo hi > cli-watch/note && mv cli-watch/note cli-watch/kept")
        first, second = json.loads(proc.stdout.readline()), json.loads(proc.stdout.readline())
        assert (first["kind"], first["path"]) == ("create", armed["watching"] + "/note")
        assert (second["kind"], second["source"], second["path"]) == (
            "move",
            armed["watching"] + "/note",
            armed["watching"] + "/kept",
        )
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""


def test_a_missing_path_or_sandbox_is_a_clear_error(held: Sandbox) -> None:
    code, out = _finished("watch", held.id, "no-such-dir")
    assert code == 2 and "cannot watch no-such-dir: no such file or directory" in out
    code, out = _finished("watch", "hm-nosuchsandbox", ".")
    assert code == 1 and "no sandbox hm-nosuchsandbox to watch on this host" in out


def test_another_process_reads_a_sandbox_cost(held: Sandbox) -> None:
    held.run("head -c 1500000 /dev/zero > cli-blob")
    code, out = _finished("stats", held.id, "--json")
    assert code == 0, out
    stats = json.loads(out)
    assert stats["sandbox_id"] == held.id and stats["source"] == "cgroup"
    assert stats["memory_limit_bytes"] == 256 << 20 and stats["pids_limit"] == 64
    assert stats["disk_bytes"] >= 1_500_000 and stats["pids"] >= 1 and stats["cpu_seconds"] > 0
    _, listed = _finished("list", "--json")
    assert held.id in {json.loads(line)["sandbox_id"] for line in listed.splitlines() if line.startswith("{")}
    _, table = _finished("stats", held.id)
    assert held.id in table and "256.0 MiB" in table and "/ 64" in table


def test_stats_of_an_unknown_sandbox_is_a_clear_error() -> None:
    code, out = _finished("stats", "hm-nosuchsandbox")
    assert code == 1 and "no sandbox hm-nosuchsandbox on this host" in out
