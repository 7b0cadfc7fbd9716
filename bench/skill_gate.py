"""Skill verification wall time: a trivial skill from `verify` to its verdict with Docker (static checks,
a fresh sandbox from the pinned image, upload, `scripts/verify.sh`, teardown). Target: under 1.5 s median.

    python -m bench.skill_gate [-n 10]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from backends import create_backend
from control_plane.skills.gate import verify
from control_plane.skills.model import GatePolicy

from .stats import report, sample

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


def collect(n: int) -> dict[str, list[float]]:
    backend = create_backend("docker")
    with tempfile.TemporaryDirectory() as tmp:
        skill = Path(tmp) / "count-lines"
        (skill / "scripts").mkdir(parents=True)
        (skill / "SKILL.md").write_text(SKILL_MD)
        (skill / "scripts" / "verify.sh").write_text(VERIFY)

        def one() -> None:
            verdict = verify(skill, GatePolicy(), backend)
            if verdict.status != "pass":
                raise SystemExit(f"the trivial skill did not pass: {verdict.reasons}")

        return {"hermetic docker: skill verification, trivial skill": sample(one, n, warmup=1)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--iterations", type=int, default=10)
    args = parser.parse_args()
    report("Skill gate", collect(args.iterations), Path(__file__).parent / "results", {})
