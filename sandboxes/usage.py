"""What the runtime sees of its sandbox's cost, for `sys.stats`: its processes (the runtime and its
descendants, from /proc: CPU time, resident memory, count) and the bytes under the workspace. Where
the host reads the sandbox's cgroup (local, docker), the cgroup's CPU, memory and pids win."""

from __future__ import annotations

import os
import time
from typing import Any

from . import procutil

DISK_ENTRIES = 200_000
"""Entries the workspace walk visits at most; past that `disk_partial` says the figure is a floor."""
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _processes() -> dict[int, tuple[int, float, int]]:
    """pid -> (parent, CPU seconds incl. waited-for children, resident bytes)."""
    found = {}
    for pid, fields in procutil.processes():
        if len(fields) >= 22:
            cpu = sum(int(f) for f in fields[11:15]) / _TICK  # utime stime cutime cstime
            found[pid] = (int(fields[1]), cpu, int(fields[21]) * _PAGE)
    return found


def _disk(root: str) -> tuple[int, bool]:
    total, seen, stack = 0, 0, [root]
    while stack and seen < DISK_ENTRIES:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    seen += 1
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        else:
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total, bool(stack)


def stats(workspace: str, started: float) -> dict[str, Any]:
    procs = _processes()
    mine, frontier = {os.getpid()}, [os.getpid()]
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in procs.items():
        children.setdefault(parent, []).append(pid)
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in mine:
                mine.add(child)
                frontier.append(child)
    disk, partial = _disk(workspace)
    return {
        "cpu_seconds": round(sum(procs[p][1] for p in mine if p in procs), 3),
        "memory_bytes": sum(procs[p][2] for p in mine if p in procs),
        "pids": len(mine & procs.keys()),
        "disk_bytes": disk,
        "disk_partial": partial,
        "uptime": time.time() - started,
    }
