"""Live metrics of a sandbox on every backend: its own cgroup where the host can read one (local,
docker), its processes as the runtime sums them elsewhere; the limits it hits become readable notes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from backends import Backend, Sandbox, SandboxSpec
from control_plane.config.settings import Limits
from control_plane.tools import TOOLS, ToolContext, ToolResult, invoke

CGROUPS = {"local", "docker"}


@pytest.fixture(scope="module")
def sandbox(backend: Backend) -> Iterator[Sandbox]:
    with backend.create(SandboxSpec(memory="256m", pids=64)) as sb:
        if sb.backend in CGROUPS and not sb.cgroup_dirs():
            pytest.skip(f"{sb.backend}: no cgroup this process can read here")
        yield sb


def test_a_reading_counts_cpu_memory_pids_and_the_workspace(sandbox: Sandbox) -> None:
    before = sandbox.stats()
    sandbox.run("head -c 3000000 /dev/zero > stats-blob; python3 -c 'sum(range(3_000_000))'")
    after = sandbox.stats()
    assert after.source == ("cgroup" if sandbox.backend in CGROUPS else "processes")
    assert after.cpu_seconds > before.cpu_seconds and after.cpu_percent is not None
    assert after.memory_bytes > 1 << 20 and after.pids >= 1
    assert after.disk_bytes is not None and after.disk_bytes - (before.disk_bytes or 0) >= 2_900_000
    if sandbox.backend in CGROUPS:  # the sandbox's own limits, as the kernel holds them
        assert after.memory_limit_bytes == 256 << 20 and after.pids_limit == 64
        assert after.memory_peak_bytes is not None and after.memory_peak_bytes >= after.memory_bytes
    assert json.loads(after.model_dump_json())["sandbox_id"] == sandbox.id  # the API's and the CLI's shape


def _terminal(sandbox: Sandbox, command: str, notices: list[str]) -> ToolResult:
    ctx = ToolContext(
        session_id="s-stats",
        call_id="c1",
        limits=Limits(),
        get_sandbox=lambda: sandbox,
        progress=lambda text: None,
        cancelled=threading.Event(),
        notify=notices.append,
    )
    return invoke(TOOLS.get("terminal"), "terminal", json.dumps({"command": command}), ctx)


def test_an_oom_kill_and_a_refused_fork_are_readable_in_the_tool_result(sandbox: Sandbox) -> None:
    if sandbox.backend not in CGROUPS:
        assert sandbox.limits_hit() == []  # no cgroup: nothing to count (the remote user's limits)
        return
    sandbox.limits_hit()  # from now on
    notices: list[str] = []
    hog = _terminal(sandbox, "python3 -c 'x = bytearray(400_000_000)'", notices)
    assert not hog.ok and "[sandbox limit: out of memory: the kernel killed 1 process(es)" in hog.content
    assert "at its memory limit (256 MiB)" in hog.content and notices[-1].startswith("sandbox limit: out of")
    forks = _terminal(sandbox, "for i in $(seq 80); do sleep 2 & done 2>/dev/null; wait", notices)
    assert "fork(s) refused at the sandbox's limit of 64 processes" in forks.content, forks.content
    quiet = _terminal(sandbox, "echo fine", notices)
    assert "sandbox limit" not in quiet.content
