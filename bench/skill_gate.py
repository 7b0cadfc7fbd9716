"""Skill verification wall time: a trivial skill from `verify` to its verdict with Docker (static checks,
the pinned image's id, a sandbox, upload, `scripts/verify.sh`, teardown), two ways:

- warm pool: the gate takes a sandbox the pool opened beforehand (what an agent's gate does from its
  second verification on); the pool refills between samples, untimed, and the used sandbox is closed
  off the verdict's path. Target (issue 38): at most 150 ms median.
- fresh sandbox: created for the check and closed before the verdict (no pool).

    python -m bench.skill_gate [-n 10]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from backends import create_backend
from backends.docker import DockerBackend
from backends.pool import WarmPool
from control_plane.skills.gate import sandbox_spec, verify
from control_plane.skills.model import GatePolicy

from . import targets
from .stats import Results, cpu_noise, print_targets, report, sample

SKILL_MD = """---
name: count-lines
description: Counts the lines of a file. Use when asked how long a file is.
metadata:
  hermetic.version: "1"
---
# Count lines
Run `wc -l < FILE`.
"""
VERIFY = "set -e\nprintf 'a\\nb\\n' > /tmp/in.txt\ntest \"$(wc -l < /tmp/in.txt)\" -eq 2\n"
WARM = "hermetic docker: skill verification, trivial skill, warm pool"
FRESH = "hermetic docker: skill verification, trivial skill, fresh sandbox"
WAIT = 300.0  # seconds a refill may take on a busy machine


def collect(n: int) -> Results:
    backend = create_backend("docker")
    assert isinstance(backend, DockerBackend)
    policy = GatePolicy()
    with tempfile.TemporaryDirectory() as tmp:
        skill = Path(tmp) / "count-lines"
        (skill / "scripts").mkdir(parents=True)
        (skill / "SKILL.md").write_text(SKILL_MD)
        (skill / "scripts" / "verify.sh").write_text(VERIFY)

        def one(pool: WarmPool | None) -> None:
            verdict = verify(skill, policy, backend, pool)
            if verdict.status != "pass":
                raise SystemExit(f"the trivial skill did not pass: {verdict.reasons}")

        pool = WarmPool(backend, size=1, idle_seconds=600)
        spec = sandbox_spec(backend.ensure_image(policy.image), [], policy.timeout)
        warm: list[float] = []
        try:
            one(pool)  # warmup: the first verification of a process finds the pool cold
            for _ in range(n):
                if not pool.wait_ready(spec, WAIT):
                    raise SystemExit(f"the pool did not refill within {WAIT:g} s")
                start = time.perf_counter()
                one(pool)
                warm.append(time.perf_counter() - start)
        finally:
            pool.close()
        return {WARM: warm, FRESH: sample(lambda: one(None), n, warmup=1)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=10)
    args = parser.parse_args()
    noise_start, load = cpu_noise(), os.getloadavg()[0]
    results = collect(args.iterations)
    noise = (noise_start, cpu_noise())
    path = report(
        "Skill gate", results, Path(__file__).parent / "results", {"cpu_loop_ms": noise, "load": load}
    )
    checked = [row for row in targets.check(results) if row["measured"] != "not measured"]
    print_targets([(str(r["target"]), str(r["measured"]), bool(r["met"])) for r in checked], noise, path)
    print(f"load average at start: {load:.2f}, at end: {os.getloadavg()[0]:.2f}")
