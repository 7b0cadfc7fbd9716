"""`hermetic sandbox stats ID` and `hermetic sandbox list` from another process: sandboxes this test holds,
read through their cgroups, their ingress sockets and their audit logs."""

from __future__ import annotations

import json
import os
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


def _sandbox_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    return subprocess.run(
        [sys.executable, "-m", "control_plane", "sandbox", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "COLUMNS": "200"},
    )


def test_another_process_reads_a_sandbox_cost(held: Sandbox) -> None:
    held.run("head -c 1500000 /dev/zero > cli-blob")
    got = _sandbox_cli("stats", held.id, "--json")
    assert got.returncode == 0, got.stdout + got.stderr
    stats = json.loads(got.stdout)
    assert stats["sandbox_id"] == held.id and stats["source"] == "cgroup"
    assert stats["memory_limit_bytes"] == 256 << 20 and stats["pids_limit"] == 64
    assert stats["disk_bytes"] >= 1_500_000 and stats["pids"] >= 1 and stats["cpu_seconds"] > 0
    listed = _sandbox_cli("list", "--json")
    assert held.id in {json.loads(line)["sandbox_id"] for line in listed.stdout.splitlines()}
    table = _sandbox_cli("stats", held.id)
    assert held.id in table.stdout and "256.0 MiB" in table.stdout and "/ 64" in table.stdout


def test_an_unknown_sandbox_is_a_clear_error() -> None:
    missing = _sandbox_cli("stats", "hm-nosuchsandbox")
    assert missing.returncode == 1 and "no sandbox hm-nosuchsandbox on this host" in missing.stdout
