"""What both peer runners share: arguments, sampling, the fleet figure, cleanup, the JSON they print.

Stdlib only: the runners run under a peer's own venv python and import this file as a sibling
(their directory is sys.path[0]); they cannot import the project.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

OUTPUT_100K = "head -c 100000 /dev/zero | tr '\\0' a"
FLEET_COMMANDS = 20
FLEET_PARALLEL = 8
"""Sandboxes created (and closed) at once: dockerd serialises much of it anyway, and 200 creates at once
time out its API calls; dockerd 20.10's libnetwork can also deadlock with many containers removed at
once (moby/moby#42545)."""
LABEL_KEY = "org.hermetic.bench-peer"
"""Docker label on every container a runner starts, so a sweep finds what a crash left behind."""


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--image", required=True, help="local image tag (never pulled)")
    parser.add_argument("-n", type=int, default=200, help="samples per fast figure")
    parser.add_argument("--concurrency", default="20,50", help="fleet sizes, comma-separated ('' for none)")
    parser.add_argument("--targets", default="docker,local", help="docker and/or local, comma-separated")
    parser.add_argument("--run-id", default=uuid.uuid4().hex[:12], help=f"value of the {LABEL_KEY} label")
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",") if c]
    args.targets = [t for t in args.targets.split(",") if t]
    unknown = set(args.targets) - {"docker", "local"}
    if unknown:
        parser.error(f"unknown targets {sorted(unknown)}; expected docker and/or local")
    return args


def counts(n: int) -> dict[str, int]:
    """Samples per figure kind, as bench/roundtrip.py takes them."""
    return {"fast": n, "100k": max(n // 5, 3), "create": max(n // 50, 3)}


def sample(fn: Callable[[], object], n: int, warmup: int = 3) -> list[float]:
    """Seconds per call of `fn`, `n` times after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def figure(samples: list[float], note: str = "", extra: dict[str, float] | None = None) -> dict[str, Any]:
    return {"samples": samples, "note": note, "extra": extra or {}}


CpuClock = Callable[[list[Any]], dict[str, float]]
"""CPU seconds so far by part ("control plane", "sandboxes", ...), given the fleet's sandboxes."""


def fleet(
    create: Callable[[], Any],
    run: Callable[[Any], object],
    close: Callable[[Any], object],
    sandboxes: int,
    clock: CpuClock | None = None,
) -> dict[str, Any]:
    """`sandboxes` created FLEET_PARALLEL at a time (untimed), then one thread each runs FLEET_COMMANDS
    `true`; closed FLEET_PARALLEL at a time.

    Samples are per-command latencies; throughput is completed commands over the wall time from the
    first start to the last end. A sandbox that fails to create counts all its commands as failed.
    With a `clock`, the extra numbers add each part's CPU microseconds per completed command over the
    same span (`cpu_us_per_cmd <part>`): what the commands cost, whatever else the machine runs.
    """

    def try_create(_: int) -> Any:
        try:
            return create()
        except Exception:
            traceback.print_exc()
            return None

    with ThreadPoolExecutor(min(sandboxes, FLEET_PARALLEL)) as pool:
        handles = list(pool.map(try_create, range(sandboxes)))
    latencies: list[float] = []
    failed = 0
    lock = threading.Lock()
    gate = threading.Barrier(sandboxes + 1)

    def drive(handle: Any) -> None:
        nonlocal failed
        gate.wait()
        if handle is None:
            with lock:
                failed += FLEET_COMMANDS
            return
        for _ in range(FLEET_COMMANDS):
            start = time.perf_counter()
            try:
                run(handle)
            except Exception as exc:
                print(f"fleet command failed: {exc!r}", file=sys.stderr)
                with lock:
                    failed += 1
                continue
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)

    threads = [threading.Thread(target=drive, args=(h,)) for h in handles]
    for thread in threads:
        thread.start()
    live = [handle for handle in handles if handle is not None]
    cpu_before = clock(live) if clock else {}
    gate.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    cpu_after = clock(live) if clock else {}
    with ThreadPoolExecutor(min(sandboxes, FLEET_PARALLEL)) as pool:
        for handle in handles:
            if handle is not None:
                pool.submit(quietly, close, handle)
    throughput = len(latencies) / wall if wall > 0 else 0.0
    done = max(len(latencies), 1)
    cpu = {part: (cpu_after[part] - cpu_before[part]) * 1e6 / done for part in cpu_after}
    note = f"{throughput:,.0f} cmd/s, {failed} failed"
    if cpu:
        note += "; CPU us/cmd: " + ", ".join(f"{part} {value:.0f}" for part, value in cpu.items())
    extra = {"throughput_cmd_s": throughput, "failed": failed, "sandboxes": sandboxes}
    extra.update({f"cpu_us_per_cmd {part}": value for part, value in cpu.items()})
    return figure(latencies, note, extra)


def quietly(fn: Callable[[Any], object], arg: Any) -> None:
    """Cleanup that must not hide the figures: report on stderr and go on."""
    try:
        fn(arg)
    except Exception:
        traceback.print_exc()


def sweep(run_id: str) -> int:
    """Force-remove every container labelled with this run's id; returns how many."""
    listing = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={LABEL_KEY}={run_id}"],
        capture_output=True,
        text=True,
        check=False,
    )
    ids = listing.stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)
    return len(ids)


class Runner:
    """Collects figures; a figure that raises is recorded with the error instead of ending the run.

    Peer libraries print to stdout (SWE-ReX does), so fd 1 is pointed at stderr for the whole run and
    the JSON goes to a saved copy of the real stdout. SIGTERM becomes SystemExit so `finally` blocks
    (cleanup, sweep) run when the collector gives up on a runner.
    """

    def __init__(self) -> None:
        self.figures: dict[str, dict[str, Any]] = {}
        self._out: TextIO = os.fdopen(os.dup(1), "w")
        sys.stdout.flush()
        os.dup2(2, 1)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    def measure(self, name: str, fn: Callable[[], dict[str, Any] | list[float]]) -> None:
        print(f"measuring {name}", file=sys.stderr, flush=True)
        try:
            value = fn()
        except Exception as exc:
            traceback.print_exc()
            value = figure([], f"failed: {type(exc).__name__}: {str(exc)[:200]}")
        self.figures[name] = value if isinstance(value, dict) else figure(value)

    def emit(self) -> None:
        json.dump({"figures": self.figures}, self._out)
        self._out.write("\n")
        self._out.flush()
