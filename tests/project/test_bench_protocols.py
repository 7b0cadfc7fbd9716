"""bench/protocols.py runs end to end with tiny counts (its figures are printed, never asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import get_backend
from mcp_servers import installed

REPO = Path(__file__).resolve().parents[2]


def test_the_protocols_benchmark_runs_with_tiny_counts() -> None:
    get_backend("local")
    servers = installed("time").parent
    run = subprocess.run(
        [sys.executable, "-m", "bench.protocols", "-n", "3", "--backend", "local", "--servers", str(servers)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    for figure in ("via mcp serve (stdio)", "in a local sandbox", "through /v1, its next turn by header"):
        assert figure in run.stdout
