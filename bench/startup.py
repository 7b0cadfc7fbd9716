"""`python -m bench.startup [-n N] [--tree DIR]`: how long a `hermetic` command takes to start, as a user
runs it: a fresh process of this Python for `hermetic --help` and for `hermetic config get model.name`
(the settings read, nothing else done), each timed from its spawn to its exit; then which of the heavy
libraries the CLI's import loads before any command runs.

`--tree DIR`: the same figures for another checkout's code (a worktree of an earlier commit), one sample
of each tree in turn, so both see the same load. The process runs in that directory, whose packages
come first on its import path.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .stats import Results, cpu_noise, report

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
COMMANDS = {"hermetic --help": ["--help"], "hermetic config get model.name": ["config", "get", "model.name"]}
HEAVY = ("openai", "litellm", "psycopg", "trafilatura", "aiohttp", "docker", "numpy", "sqlalchemy")
"""Libraries that take a tenth of a second or more to import on this machine."""


def _spawn(tree: Path, argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "control_plane", *argv], cwd=tree, env=env, capture_output=True, timeout=120
    )
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} in {tree} failed: {done.stderr.decode()[-2000:]}")
    return took


def loaded(tree: Path) -> list[str]:
    """The heavy libraries in sys.modules once the CLI is imported (in `tree`)."""
    probe = f"import sys, control_plane.cli.main; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tree, capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.split()


def collect(trees: dict[str, Path], n: int) -> Results:
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="hm-startup-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")} | {"HERMETIC_ROOT": home}
        for tree in trees.values():  # untimed: each tree's bytecode compiled and cached first
            for argv in COMMANDS.values():
                _spawn(tree, argv, env)
        for _ in range(n):
            for label, tree in trees.items():
                for name, argv in COMMANDS.items():
                    samples.setdefault(f"{label}: {name}", []).append(_spawn(tree, argv, env))
    return {name: taken for name, taken in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=10)
    parser.add_argument("--tree", type=Path, help="another checkout, timed in turn with this one")
    args = parser.parse_args()
    trees = {"this tree": REPO}
    if args.tree is not None:
        trees[f"{args.tree.name}"] = args.tree.resolve()
    noise_start = cpu_noise()
    results = collect(trees, args.iterations)
    noise_end = cpu_noise()
    heavy = {label: loaded(tree) for label, tree in trees.items()}
    path = report("A command's start-up (spawn to exit)", results, HERE / "results", {"loaded": heavy})
    for label, names in heavy.items():
        print(f"{label}: the CLI's import loads {', '.join(names) or 'none of ' + ', '.join(HEAVY)}")
    print(f"CPU noise loop: {noise_start:.1f} ms at start, {noise_end:.1f} ms at end; raw samples: {path}")


if __name__ == "__main__":
    main()
