"""`python -m bench`: every figure of issue 7 for our backends and the peers, measured in one run.

Prints a table (median, p90, min, max), the targets checked on this run's medians, and the machine's
noise (a fixed CPU loop at start and end); writes the raw samples to bench/results/DATE.json. Peers are
installed into their own virtual environments under bench/.peers on first use (never into ours).
"""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path

from backends import SandboxSpec

from . import agent_step, browser, concurrency, memory, roundtrip, skill_gate, store, targets
from .stats import Results, cpu_noise, report

PEER_FLEET_MAX = 50
"""The peers run their fleets up to this size: at 37 cmd/s, 200 of hermes-agent's sandboxes take minutes."""
SECTIONS = ("peers", "pool", "concurrency", "browser", "store", "memory", "agent", "skill-gate", "network")


def names(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=500, help="samples per fast figure")
    parser.add_argument("--backends", default="local,docker,ssh", help="our backends, comma-separated")
    parser.add_argument(
        "--peers", default="hermes-agent,swe-rex", help="peers, comma-separated ('' for none)"
    )
    parser.add_argument(
        "--concurrency",
        default="20,50,200",
        help=f"sandbox counts for the concurrency figure (the peers' only up to {PEER_FLEET_MAX})",
    )
    parser.add_argument("--store", default="sqlite,postgresql", help="store dialects ('' for none)")
    parser.add_argument("--store-messages", type=int, default=100_000, help="messages in the store")
    parser.add_argument("--bulk-mb", type=int, default=200, help="MB of the network section's download")
    parser.add_argument("--skip", default="", help=f"sections to leave out: {', '.join(SECTIONS)}")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    skip = set(names(args.skip))
    if unknown := skip - set(SECTIONS):
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    n, backends, counts = args.iterations, names(args.backends), [int(c) for c in names(args.concurrency)]
    peers = [] if "peers" in skip else names(args.peers)

    noise_start = cpu_noise()
    image = SandboxSpec().image
    results: Results = {}
    if peers:
        from . import peers as peer_bench

        image = peer_bench.image()  # ours + swe-rex: every contender runs the same image
        peer_counts = [count for count in counts if count <= PEER_FLEET_MAX]
        results.update(peer_bench.collect(peers, n, peer_counts, ["docker", "local"]))
    results.update(roundtrip.collect(backends, n, image))
    if "pool" not in skip:
        from . import pool

        results.update(
            pool.collect([b for b in backends if b in ("docker", "local")], max(n // 10, 3), image)
        )
    if "concurrency" not in skip:
        results.update(concurrency.collect(backends, counts, image))
    if "browser" not in skip:
        results.update(browser.collect(backends, n))
    if "agent" not in skip:
        results.update(agent_step.collect([b for b in ("docker", "local") if b in backends], min(n, 300)))
    if "store" not in skip:
        sessions = max(1, min(2_000, args.store_messages // 50))
        results.update(store.collect(names(args.store), n, args.store_messages, sessions))
    if "memory" not in skip:
        results.update(memory.collect(n))
    if "skill-gate" not in skip and "docker" in backends:
        results.update(skill_gate.collect(max(n // 50, 3)))
    network_targets: list[tuple[str, str, bool]] = []
    if "network" not in skip and "local" in backends:
        from . import network

        figures, network_targets = network.collect(n, args.bulk_mb)
        results.update(figures)
    noise_end = cpu_noise()

    checked = targets.check(results) + [
        {"target": text, "measured": measured, "met": met} for text, measured, met in network_targets
    ]
    extra = {
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_loop_ms": [noise_start, noise_end],
        "image": image,
        "targets": checked,
    }
    path = report("Hermetic and peers, one run", results, args.out, extra)
    targets.show(checked)
    print(f"CPU noise loop: {noise_start:.1f} ms at start, {noise_end:.1f} ms at end; raw samples: {path}")


main()
