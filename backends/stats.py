"""What a sandbox is costing right now: CPU, memory, pids from its own cgroup (local, docker) or from the
runtime's view of its processes (`sys.stats`: ssh, Modal, or no readable cgroup), the workspace's disk
use (the runtime), and the bytes its egress proxy carried (the audit log)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from .network import read_audit

CGROUP_ROOT = Path("/sys/fs/cgroup")


class SandboxStats(BaseModel):
    """One reading. Counters (`cpu_seconds`, `oom_kills`, `pids_max_hits`) count from the sandbox's start."""

    model_config = ConfigDict(frozen=True)

    sandbox_id: str
    source: str
    """`cgroup` (the kernel's accounting of the sandbox's own cgroup) or `processes` (its processes
    summed by the runtime: no cgroup to read; memory is then the sum of their resident sets)."""
    cpu_seconds: float
    cpu_percent: float | None
    """Of one core, since the previous reading by this process (over the sandbox's life for the first)."""
    memory_bytes: int
    memory_peak_bytes: int | None
    memory_limit_bytes: int | None
    pids: int
    pids_limit: int | None
    oom_kills: int
    """Processes the kernel's OOM killer ended in this sandbox's cgroup."""
    pids_max_hits: int
    """Forks refused because the cgroup was at pids.max."""
    disk_bytes: int | None
    """Bytes of the files under the workspace (None when not measured)."""
    egress_bytes_up: int
    egress_bytes_down: int
    at: float
    """When it was read (Unix time)."""


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None


def _keyed(text: str | None) -> dict[str, int]:
    """`key value` lines (memory.events, pids.events, cpu.stat, memory.oom_control)."""
    found = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            found[key] = int(value)
    return found


def cgroup_dirs_of(pid: int) -> dict[str, Path]:
    """The cgroup directory of a host process per controller ("" for v2's unified one), from /proc."""
    dirs: dict[str, Path] = {}
    text = _read(Path(f"/proc/{pid}/cgroup")) or ""
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            base = CGROUP_ROOT / controller if controller else CGROUP_ROOT
            if controller == "" and (CGROUP_ROOT / "unified").is_dir():
                base = CGROUP_ROOT / "unified"  # a hybrid host: v2's hierarchy is mounted there
            dirs[controller] = base / path.lstrip("/")
    return dirs


def read_cgroup(dirs: dict[str, Path]) -> dict[str, Any] | None:
    """CPU, memory and pids of a cgroup (v1 controllers or v2's unified directory); None when unreadable."""
    if "memory" in dirs and (dirs["memory"] / "memory.usage_in_bytes").exists():  # v1
        memory, pids, cpuacct = dirs["memory"], dirs.get("pids"), dirs.get("cpuacct")
        oom = _keyed(_read(memory / "memory.oom_control"))
        usage = _number(_read(cpuacct / "cpuacct.usage")) if cpuacct else None
        return {
            "cpu_seconds": usage / 1e9 if usage is not None else None,
            "memory_bytes": _number(_read(memory / "memory.usage_in_bytes")) or 0,
            "memory_peak_bytes": _number(_read(memory / "memory.max_usage_in_bytes")),
            "memory_limit_bytes": _limit(_read(memory / "memory.limit_in_bytes")),
            "pids": _number(_read(pids / "pids.current")) if pids else None,
            "pids_limit": _limit(_read(pids / "pids.max")) if pids else None,
            "oom_kills": oom.get("oom_kill", 0),
            "pids_max_hits": _keyed(_read(pids / "pids.events")).get("max", 0) if pids else 0,
        }
    unified = dirs.get("")
    if unified is None or not (unified / "memory.current").exists():
        return None
    return {
        "cpu_seconds": _keyed(_read(unified / "cpu.stat")).get("usage_usec", 0) / 1e6,
        "memory_bytes": _number(_read(unified / "memory.current")) or 0,
        "memory_peak_bytes": _number(_read(unified / "memory.peak")),
        "memory_limit_bytes": _limit(_read(unified / "memory.max")),
        "pids": _number(_read(unified / "pids.current")),
        "pids_limit": _limit(_read(unified / "pids.max")),
        "oom_kills": _keyed(_read(unified / "memory.events")).get("oom_kill", 0),
        "pids_max_hits": _keyed(_read(unified / "pids.events")).get("max", 0),
    }


class LimitCounts(NamedTuple):
    """The cgroup's counters of limits hit: what a tool call compares before and after."""

    oom_kills: int
    pids_max_hits: int


def limit_counts(dirs: dict[str, Path]) -> LimitCounts | None:
    """The two counters alone (two small files, read on every tool call), not read_cgroup's whole
    reading; None when the cgroup is unreadable."""
    memory, pids, unified = dirs.get("memory"), dirs.get("pids"), dirs.get("")
    if memory is not None and (oom := _read(memory / "memory.oom_control")) is not None:  # v1
        events = _read(pids / "pids.events") if pids else None
    elif unified is not None and (oom := _read(unified / "memory.events")) is not None:
        events = _read(unified / "pids.events")
    else:
        return None
    return LimitCounts(_keyed(oom).get("oom_kill", 0), _keyed(events).get("max", 0))


def _limit(text: str | None) -> int | None:
    """A limit, or None for none ("max", or v1's huge page-rounded 'unlimited')."""
    value = _number(text)
    return value if value is not None and value < 1 << 60 else None


def egress_bytes(sandbox_id: str) -> tuple[int, int]:
    """Bytes up and down of the sandbox's finished egress connections (its audit log)."""
    up = down = 0
    for entry in read_audit(sandbox_id):
        up += int(entry.get("bytes_up", 0))
        down += int(entry.get("bytes_down", 0))
    return up, down


class StatsReader:
    """Readings of one sandbox, keeping the previous one for the CPU percentage."""

    def __init__(self, sandbox_id: str) -> None:
        self.sandbox_id = sandbox_id
        self._last: SandboxStats | None = None

    def reading(self, runtime: Mapping[str, Any], cgroup: dict[str, Any] | None) -> SandboxStats:
        """Combine the runtime's `sys.stats` with the cgroup's figures where there are some."""
        figures = {
            key: runtime.get(key)
            for key in ("cpu_seconds", "memory_bytes", "memory_peak_bytes", "pids", "disk_bytes")
        }
        figures.update({k: v for k, v in (cgroup or {}).items() if v is not None})
        up, down = egress_bytes(self.sandbox_id)
        now = time.time()
        cpu = float(figures["cpu_seconds"] or 0.0)
        if self._last is not None and now > self._last.at:
            percent: float | None = max(0.0, (cpu - self._last.cpu_seconds) / (now - self._last.at) * 100)
        else:
            uptime = float(runtime.get("uptime") or 0.0)
            percent = cpu / uptime * 100 if uptime > 0 else None
        stats = SandboxStats(
            sandbox_id=self.sandbox_id,
            source="cgroup" if cgroup else "processes",
            cpu_seconds=round(cpu, 3),
            cpu_percent=None if percent is None else round(percent, 1),
            memory_bytes=int(figures["memory_bytes"] or 0),
            memory_peak_bytes=figures.get("memory_peak_bytes"),
            memory_limit_bytes=figures.get("memory_limit_bytes"),
            pids=int(figures["pids"] or 0),
            pids_limit=figures.get("pids_limit"),
            oom_kills=int(figures.get("oom_kills") or 0),
            pids_max_hits=int(figures.get("pids_max_hits") or 0),
            disk_bytes=figures.get("disk_bytes"),
            egress_bytes_up=up,
            egress_bytes_down=down,
            at=now,
        )
        self._last = stats
        return stats


def changes(before: LimitCounts, after: LimitCounts, dirs: dict[str, Path]) -> list[str]:
    """Limits hit between two counts, as sentences for the agent and the session's events (the limits
    themselves read from `dirs` only then)."""
    if after == before:
        return []
    limits = read_cgroup(dirs) or {}
    found = []
    if after.oom_kills > before.oom_kills:
        memory = limits.get("memory_limit_bytes")
        limit = f" ({memory // (1 << 20)} MiB)" if memory else ""
        found.append(
            f"out of memory: the kernel killed {after.oom_kills - before.oom_kills} process(es) in the "
            f"sandbox at its memory limit{limit}"
        )
    if after.pids_max_hits > before.pids_max_hits:
        found.append(
            f"process limit: {after.pids_max_hits - before.pids_max_hits} fork(s) refused at the sandbox's "
            f"limit of {limits.get('pids_limit')} processes"
        )
    return found
