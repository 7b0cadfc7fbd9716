"""bench.startup runs end to end with one sample (its figures are never asserted here), naming what the
CLI's import loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_startup_benchmark_runs_with_one_sample() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.startup", "-n", "1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "this tree: hermetic --help" in run.stdout and "this tree: hermetic config get" in run.stdout
    loads = next(line for line in run.stdout.splitlines() if line.startswith("this tree: the CLI's import"))
    assert "openai" not in loads and "psycopg" not in loads, loads
