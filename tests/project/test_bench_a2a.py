"""bench/a2a.py runs end to end with tiny counts (its figures are printed, never asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import get_backend

REPO = Path(__file__).resolve().parents[2]


def test_the_a2a_benchmark_runs_with_tiny_counts() -> None:
    get_backend("local")
    run = subprocess.run(
        [sys.executable, "-m", "bench.a2a", "-n", "2"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "a task through A2A SendMessage" in run.stdout
