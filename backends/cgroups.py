"""Per-sandbox pids, memory and CPU limits through cgroups (v1 or v2), where this process may make them."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path

log = logging.getLogger("hermetic.cgroups")

ROOT = Path("/sys/fs/cgroup")
_PERIOD_US = 100_000


def cgroup_controller(path: Path) -> str:
    """The v1 controller a directory under ROOT belongs to, or "" for v2's unified hierarchy."""
    first = path.relative_to(ROOT).parts[0]
    return "" if first == "hermetic" else first


class CgroupLimits:
    """The cgroup directories of one sandbox. `enter()` runs in the child before exec."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs

    @classmethod
    def create(cls, name: str, pids: int, memory: int, cpus: float) -> CgroupLimits | None:
        """Make the cgroups and write the limits; None when cgroups cannot be written here."""
        try:
            if (ROOT / "cgroup.controllers").exists():
                return cls._create_v2(name, pids, memory, cpus)
            return cls._create_v1(name, pids, memory, cpus)
        except OSError as exc:
            log.info("cgroups not usable (%s); falling back to rlimits", exc)
            return None

    @classmethod
    def _create_v1(cls, name: str, pids: int, memory: int, cpus: float) -> CgroupLimits | None:
        wanted = {
            "pids": {"pids.max": str(pids)},
            "memory": {"memory.limit_in_bytes": str(memory), "memory.memsw.limit_in_bytes": str(memory)},
            "cpu": {"cpu.cfs_period_us": str(_PERIOD_US), "cpu.cfs_quota_us": str(int(cpus * _PERIOD_US))},
        }
        if not all((ROOT / ctl).is_dir() for ctl in ("pids", "memory")):
            return None
        dirs = []
        for controller, files in wanted.items():
            if not (ROOT / controller).is_dir():
                continue
            path = ROOT / controller / "hermetic" / name
            path.mkdir(parents=True, exist_ok=True)
            dirs.append(path)
            for fname, value in files.items():
                if (path / fname).exists():  # memsw exists only with swap accounting
                    (path / fname).write_text(value)
        return cls(dirs)

    @classmethod
    def _create_v2(cls, name: str, pids: int, memory: int, cpus: float) -> CgroupLimits | None:
        parent = ROOT / "hermetic"
        parent.mkdir(exist_ok=True)
        available = (ROOT / "cgroup.subtree_control").read_text().split()
        if not {"pids", "memory"} <= set(available):
            return None
        (parent / "cgroup.subtree_control").write_text(
            " ".join(f"+{c}" for c in available if c in ("pids", "memory", "cpu"))
        )
        path = parent / name
        path.mkdir(exist_ok=True)
        (path / "pids.max").write_text(str(pids))
        (path / "memory.max").write_text(str(memory))
        if (path / "memory.swap.max").exists():
            (path / "memory.swap.max").write_text("0")
        if (path / "cpu.max").exists():
            (path / "cpu.max").write_text(f"{int(cpus * _PERIOD_US)} {_PERIOD_US}")
        return cls([path])

    def enter(self) -> None:
        """Move the calling process into every cgroup (called in the child, before exec)."""
        pid = str(os.getpid())
        for path in self.dirs:
            (path / "cgroup.procs").write_text(pid)

    def remove(self) -> None:
        """Kill whatever is left inside and delete the cgroups."""
        for path in self.dirs:
            for _ in range(100):
                try:
                    members = (path / "cgroup.procs").read_text().split()
                    for pid in members:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), signal.SIGKILL)
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)  # killed processes take a moment to leave the cgroup
