"""Many sandboxes at once, measured exactly as the peers' runners measure it (one `fleet`, in
bench/peers/runner_kit.py): N created in parallel (not timed), then one thread per sandbox runs 20
commands; per-command latencies, throughput (completed commands over the wall time from the first start
to the last end) and failures (a sandbox that could not be created fails all its commands); and the CPU
each part spent per command (the control plane, the sandboxes, dockerd and the shims), which says what
the machine could do were it not shared."""

from __future__ import annotations

import resource
from functools import partial
from pathlib import Path
from typing import Any

from backends import BackendUnavailable, Sandbox, SandboxSpec, create_backend
from backends.stats import read_cgroup

from .peers.runner_kit import FLEET_COMMANDS, CpuClock, fleet
from .stats import Figure, Results

DAEMONS = {"dockerd": ("dockerd",), "containerd": ("containerd", "containerd-shim")}  # comm: 15 chars
"""The docker commands' other hops: dockerd copies the attach streams, a shim per container its stdio."""


def run_true(sandbox: Sandbox) -> None:
    result = sandbox.run("true")
    if result["exit_code"] != 0:
        raise RuntimeError(f"`true` exited {result['exit_code']}: {result['output'][-300:]}")


def process_cpu(names: tuple[str, ...]) -> float:
    """CPU seconds of every process on the host named one of `names` (clock ticks of /proc/PID/stat)."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # gone meanwhile
            continue
        if text[text.index("(") + 1 : text.rindex(")")] in names:
            fields = text.rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / 100


def cpu_clock(backend: str) -> CpuClock:
    """The fleet's CPU by part: this process (the control plane), the sandboxes' cgroups, and for docker
    the daemons on the way."""

    def clock(sandboxes: list[Any]) -> dict[str, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        parts = {"control plane": usage.ru_utime + usage.ru_stime}
        readings = [(read_cgroup(sandbox.cgroup_dirs()) or {}).get("cpu_seconds") for sandbox in sandboxes]
        if any(reading is not None for reading in readings):  # local on cgroup v1: no cpuacct of its own
            parts["sandboxes"] = sum(reading or 0.0 for reading in readings)
        if backend == "docker":
            parts.update({part: process_cpu(names) for part, names in DAEMONS.items()})
        return parts

    return clock


def collect(backends: list[str], counts: list[int], image: str) -> Results:
    results: Results = {}
    for name in backends:
        if name not in ("local", "docker"):  # ssh and modal: one host or the cloud, not this figure
            continue
        try:
            backend = create_backend(name)
        except BackendUnavailable as exc:
            print(f"skipping {name}: {exc}")
            continue
        spec = SandboxSpec(image=image, memory="256m")
        for count in counts:
            measured = fleet(partial(backend.create, spec), run_true, Sandbox.close, count, cpu_clock(name))
            results[f"hermetic {name}: {count} sandboxes x {FLEET_COMMANDS} commands"] = Figure(**measured)
    return results
