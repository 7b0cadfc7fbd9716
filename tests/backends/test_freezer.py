"""Holding a docker sandbox still for a copy's last pass: its cgroup frozen from the control plane where
the host lets it (backends/freezer.py), `docker pause` otherwise (the compose stack's test covers that
path: its control plane sees no host cgroup)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import Backend, SandboxSpec
from backends.docker import DockerSandbox
from backends.errors import SandboxGone
from backends.freezer import CgroupFreezer
from backends.snapshots import SnapshotStore


@pytest.fixture
def busy(backend: Backend) -> Iterator[DockerSandbox]:
    """A docker sandbox with a process that never stops computing."""
    if backend.name != "docker":
        pytest.skip("docker-only: only docker's copies pause the sandbox (a two-pass copy's last pass)")
    with backend.create(SandboxSpec(memory="512m", pids=256)) as sb:
        assert isinstance(sb, DockerSandbox)
        sb.run("nohup sh -c 'while :; do :; done' >/dev/null 2>&1 &")
        yield sb


def _freezer(sb: DockerSandbox) -> CgroupFreezer:
    found = CgroupFreezer.of(sb.cgroup_dirs())
    if found is None:
        pytest.skip(f"this process may not write the cgroup {sb.cgroup_dirs()}: not root on its host")
    return found


def _cpu_ticks(sb: DockerSandbox, freezer: CgroupFreezer) -> int:
    """User and system time of every process in the sandbox, in clock ticks."""
    total = 0
    for pid in (freezer.directory / "cgroup.procs").read_text().split():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except FileNotFoundError:
            continue  # ended meanwhile
        total += int(fields[11]) + int(fields[12])
    return total


def test_a_frozen_sandbox_runs_nothing_until_it_is_thawed(busy: DockerSandbox) -> None:
    freezer = _freezer(busy)
    assert isinstance(busy._pause(), CgroupFreezer)  # what snapshots and forks use here
    freezer.pause()
    try:
        before = _cpu_ticks(busy, freezer)
        time.sleep(0.5)  # an interval to watch, not a wait for something: a frozen loop gets no CPU in it
        assert _cpu_ticks(busy, freezer) == before
    finally:
        freezer.resume()
    deadline = time.monotonic() + 60
    while _cpu_ticks(busy, freezer) == before:
        assert time.monotonic() < deadline, "the loop never ran again after the thaw"
    assert busy.run("echo awake", timeout=30)["output"] == "awake\n"


def test_a_snapshot_of_a_busy_sandbox_freezes_it_for_the_last_pass_only(
    backend: Backend, busy: DockerSandbox, tmp_path: Path
) -> None:
    _freezer(busy)
    before, backend.snapshots = backend._snapshots, SnapshotStore(tmp_path / "snapshots")
    try:
        busy.run("echo kept > f.txt")
        snapshot = busy.snapshot()
        assert 0 < busy.paused_seconds < 60 and busy.run("cat f.txt")["output"] == "kept\n"
        assert busy.run("pgrep -c -f 'while :'")["output"].strip() == "1"  # the loop lives on, thawed
        with backend.create(SandboxSpec(from_snapshot=snapshot.id)) as restored:
            assert restored.run("cat f.txt")["output"] == "kept\n"
        backend.delete_snapshot(snapshot.id)
    finally:
        backend._snapshots = before


def test_freezing_a_removed_sandbox_says_it_is_gone(backend: Backend, busy: DockerSandbox) -> None:
    freezer = _freezer(busy)
    backend.client.api.remove_container(busy.id, force=True)  # type: ignore[attr-defined]
    with pytest.raises(SandboxGone, match="is gone"):
        freezer.pause()
