"""Many sandboxes at once, measured exactly as the peers' runners measure it (one `fleet`, in
bench/peers/runner_kit.py): N created in parallel (not timed), then one thread per sandbox runs 20
commands; per-command latencies, throughput (completed commands over the wall time from the first start
to the last end) and failures (a sandbox that could not be created fails all its commands)."""

from __future__ import annotations

from functools import partial

from backends import BackendUnavailable, Sandbox, SandboxSpec, create_backend

from .peers.runner_kit import FLEET_COMMANDS, fleet
from .stats import Figure, Results


def run_true(sandbox: Sandbox) -> None:
    result = sandbox.run("true")
    if result["exit_code"] != 0:
        raise RuntimeError(f"`true` exited {result['exit_code']}: {result['output'][-300:]}")


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
            measured = fleet(partial(backend.create, spec), run_true, Sandbox.close, count)
            results[f"hermetic {name}: {count} sandboxes x {FLEET_COMMANDS} commands"] = Figure(**measured)
    return results
