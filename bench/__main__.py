"""`python -m bench`: round trips, start times, store, memory and agent-step figures; raw samples to JSON."""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

from . import agent_step, browser, memory, roundtrip, store
from .stats import cpu_noise, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--iterations", type=int, default=500, help="samples per fast figure")
    parser.add_argument("--backends", default="local,docker,ssh", help="comma-separated backends")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--no-browser", action="store_true", help="skip the browser figures")
    parser.add_argument(
        "--store", default="sqlite,postgresql", help="comma-separated store dialects ('' for none)"
    )
    parser.add_argument(
        "--store-messages", type=int, default=100_000, help="messages in the store's database"
    )
    parser.add_argument(
        "--agent", default="docker,local", help="backends for the agent step overhead ('' for none)"
    )
    args = parser.parse_args()
    noise_start = cpu_noise()
    backends = [b for b in args.backends.split(",") if b]
    results = roundtrip.collect(backends, args.iterations)
    if not args.no_browser:
        results.update(browser.collect(backends, args.iterations))
    dialects = [d for d in args.store.split(",") if d]
    results.update(store.collect(dialects, args.iterations, args.store_messages))
    results.update(memory.collect(args.iterations))
    agent_backends = [b for b in args.agent.split(",") if b]
    results.update(agent_step.collect(agent_backends, min(args.iterations, 300)))
    noise_end = cpu_noise()
    extra = {
        "machine": platform.platform(),
        "cpus": __import__("os").cpu_count(),
        "cpu_loop_ms": [noise_start, noise_end],
    }
    path = report("Hermetic round trips", results, args.out, extra)
    print(f"CPU noise loop: {noise_start:.1f} ms at start, {noise_end:.1f} ms at end; raw samples: {path}")


main()
