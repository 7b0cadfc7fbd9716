"""`hermetic sandbox watch ID PATH` from another process: the events of a sandbox this test holds, carried
through its ingress socket (local with bubblewrap, docker)."""

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
    with get_backend(request.param).create(SandboxSpec(memory="256m", pids=128)) as sb:
        if sb.ingress is None:
            pytest.skip(f"{request.param}: this sandbox has no ingress socket (local needs bubblewrap)")
        yield sb


def _watch(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    return subprocess.Popen(
        [sys.executable, "-m", "control_plane", "sandbox", "watch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "COLUMNS": "200"},
    )


def test_another_process_sees_the_sandbox_files_change(held: Sandbox) -> None:
    held.run("rm -rf cli-watch; mkdir cli-watch")
    proc = _watch(held.id, "cli-watch", "--json")
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
    missing = _watch(held.id, "no-such-dir")
    out, _ = missing.communicate(timeout=60)
    assert missing.returncode == 2 and "cannot watch no-such-dir: no such file or directory" in out
    nobody = _watch("hm-nosuchsandbox", ".")
    out, _ = nobody.communicate(timeout=60)
    assert nobody.returncode == 1 and "no sandbox hm-nosuchsandbox to watch on this host" in out
