"""bench/acp.py runs end to end with tiny counts (its figures are printed, never asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import get_backend

REPO = Path(__file__).resolve().parents[2]


def test_the_acp_benchmark_runs_with_tiny_counts() -> None:
    get_backend("local")
    run = subprocess.run(
        [sys.executable, "-m", "bench.acp", "-n", "2"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "first agent_message_chunk, hermetic acp" in run.stdout
