"""`python -m bench.peers [setup] [-n N]`: build the peers' venvs and image, or measure them alone."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..stats import report
from . import PEERS, collect, setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", nargs="?", choices=["run", "setup"], default="run")
    parser.add_argument("-n", "--iterations", type=int, default=200, help="samples per fast figure")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated peers")
    parser.add_argument("--concurrency", default="20,50", help="fleet sizes, comma-separated ('' for none)")
    parser.add_argument("--targets", default="docker,local", help="docker and/or local")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent.parent / "results")
    args = parser.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    if args.command == "setup":
        for line in setup(peers):
            print(line)
        return
    concurrency = [int(c) for c in args.concurrency.split(",") if c]
    targets = [t for t in args.targets.split(",") if t]
    results = collect(peers, args.iterations, concurrency, targets)
    path = report("Peers", results, args.out, {"peers": peers})
    print(f"raw samples: {path}")


main()
