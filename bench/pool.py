"""Warm-pool acquire to first command, per backend: `python -m bench.pool [-n N]`."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from backends import BackendUnavailable, SandboxSpec, create_backend
from backends.pool import WarmPool

from .stats import Results, cpu_noise, report

READY_TIMEOUT = 120.0


def collect(backends: list[str], n: int, image: str | None = None) -> Results:
    """Seconds from acquire to `true` done on a warm sandbox; the refill between samples is awaited
    (untimed), so every sample takes a warm one. Closing the sandbox is not timed either."""
    spec = SandboxSpec(image=image) if image else SandboxSpec()
    results: Results = {}
    for name in backends:
        try:
            backend = create_backend(name)
        except BackendUnavailable as exc:
            print(f"skipping {name}: {exc}")
            continue
        pool = WarmPool(backend, size=1, idle_seconds=600)
        samples = []
        try:
            pool.prefill(spec)
            for _ in range(n):
                if not pool.wait_ready(spec, READY_TIMEOUT):
                    raise SystemExit(f"the {name} pool did not refill within {READY_TIMEOUT} s")
                start = time.perf_counter()
                sandbox = pool.acquire(spec)
                sandbox.run("true")
                samples.append(time.perf_counter() - start)
                sandbox.close()
        finally:
            pool.close()
        results[f"hermetic {name}: warm-pool acquire to first command"] = samples
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--iterations", type=int, default=50)
    parser.add_argument("--backends", default="docker,local", help="comma-separated backends")
    parser.add_argument("--image", default=None, help="image for docker (default: hermetic-sandbox:slim)")
    args = parser.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    noise_start = cpu_noise()
    results = collect(backends, args.iterations, args.image)
    noise_end = cpu_noise()
    path = report(
        "Warm pool", results, Path(__file__).parent / "results", {"cpu_loop_ms": [noise_start, noise_end]}
    )
    print(f"CPU noise loop: {noise_start:.1f} ms at start, {noise_end:.1f} ms at end; raw samples: {path}")
