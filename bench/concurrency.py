"""Many sandboxes at once: N created in parallel (not timed), then one thread per sandbox runs 20
commands. Samples are per-command latencies; the note has throughput (all commands over the wall time
from the first start to the last end) and failures (a sandbox that could not be created fails all its
commands). The peers' runners measure the same way."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from backends import Backend, BackendUnavailable, Sandbox, SandboxError, SandboxSpec, create_backend

from .stats import Figure, Results

COMMANDS = 20


def many(backend: Backend, spec: SandboxSpec, count: int) -> Figure:
    def make(_: int) -> Sandbox | None:
        try:
            return backend.create(spec)
        except SandboxError as exc:
            print(f"{backend.name}: a sandbox could not be created: {exc}")
            return None

    with ThreadPoolExecutor(max_workers=min(count, 16)) as pool:
        sandboxes = list(pool.map(make, range(count)))
    latencies: list[float] = []
    failed = COMMANDS * sandboxes.count(None)
    lock = threading.Lock()
    go = threading.Barrier(count + 1)

    def work(sandbox: Sandbox | None) -> None:
        nonlocal failed
        go.wait()
        if sandbox is None:
            return
        for _ in range(COMMANDS):
            start = time.perf_counter()
            try:
                result = sandbox.run("true")
                error = None if result["exit_code"] == 0 else f"exit code {result['exit_code']}: {result}"
            except SandboxError as exc:
                error = str(exc)
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                if error is not None:
                    failed += 1
                    if failed <= 3:
                        print(f"{backend.name}: a command failed: {error}")

    threads = [threading.Thread(target=work, args=(sb,)) for sb in sandboxes]
    for thread in threads:
        thread.start()
    go.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda sb: sb.close(), [sb for sb in sandboxes if sb is not None]))
    throughput = count * COMMANDS / wall
    return Figure(
        latencies,
        note=f"{throughput:,.0f} cmd/s, {failed} failed",
        extra={"throughput_cmd_s": throughput, "failed": failed, "sandboxes": count},
    )


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
            results[f"hermetic {name}: {count} sandboxes x {COMMANDS} commands"] = many(backend, spec, count)
    return results
