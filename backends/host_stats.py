"""Stats of sandboxes another process on this host holds (`hermetic sandbox stats`, `... list`): found
by their ingress sockets (local with bubblewrap, docker), read from their cgroups and their runtimes."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from .network import NET_ROOT, Ingress, net_dir, sandbox_of
from .stats import CGROUP_ROOT, SandboxStats, StatsReader, cgroup_dirs_of, read_cgroup


def reachable(root: Path = NET_ROOT) -> list[str]:
    """The ids of sandboxes whose runtime answers on their ingress socket here, sorted."""
    found = []
    for directory in sorted(root.glob("*/in")):
        with contextlib.suppress(OSError):
            Ingress(sandbox_of(directory.parent), directory.parent).connect().close()
            found.append(sandbox_of(directory.parent))
    return found


def cgroup_dirs(sandbox_id: str) -> dict[str, Path]:
    """A sandbox's cgroup directories: the local backend's (hermetic/ID), else its docker container's."""
    unified = CGROUP_ROOT / "hermetic" / sandbox_id
    if (unified / "memory.current").exists():
        return {"": unified}
    v1 = {c: CGROUP_ROOT / c / "hermetic" / sandbox_id for c in ("pids", "memory", "cpu", "cpuacct")}
    if found := {c: d for c, d in v1.items() if d.is_dir()}:
        return found
    try:
        import docker

        pid = int(docker.from_env().api.inspect_container(sandbox_id)["State"]["Pid"])
    except Exception:  # no docker here, or no such container: no cgroup to read  # noqa: BLE001
        return {}
    return cgroup_dirs_of(pid) if pid else {}


def runtime_stats(sandbox_id: str) -> dict[str, Any]:
    """The runtime's `sys.stats`, asked on its ingress socket. Raises OSError (no such sandbox here)."""
    with Ingress(sandbox_id, net_dir(sandbox_id)).connect() as sock:
        sock.settimeout(30)
        sock.sendall(b"stats\n")
        line = sock.makefile("rb").readline()
    if not line:
        raise OSError(f"sandbox {sandbox_id} closed the connection")
    answer = json.loads(line)  # from inside the sandbox: only numbers are taken from it
    return {k: v for k, v in answer.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def read(reader: StatsReader) -> SandboxStats:
    """One reading of the sandbox `reader` is for. Raises OSError."""
    return reader.reading(runtime_stats(reader.sandbox_id), read_cgroup(cgroup_dirs(reader.sandbox_id)))
