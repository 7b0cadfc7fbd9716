"""bench/gateway_matrix.py runs end to end on a real Synapse with tiny counts (its figures are printed and
written, never asserted: timings belong to bench/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from synapse_server import VENV

REPO = Path(__file__).resolve().parents[2]


def test_the_matrix_benchmark_runs_with_tiny_counts_and_writes_its_samples(tmp_path: Path) -> None:
    if not (VENV / "bin" / "python").exists():
        pytest.skip(f"Synapse is not installed in {VENV} (setup.sh installs it from PyPI)")
    run = subprocess.run(
        [sys.executable, "-m", "bench.gateway_matrix", "--chats", "2", "--messages", "2", "-n", "2",
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    [path] = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    assert data["extra"] == {"section": "gateway-matrix"}
    figures = data["figures"]
    counts = {
        "gateway matrix: a person's send answered by Synapse (for scale)": 2,
        "gateway matrix: message -> first model request": 2,
        "gateway matrix: 2 chats x 2 messages, message -> first model request": 4,
        "gateway matrix: 2 chats x 2 messages, message -> answered": 4,
    }
    assert {name: len(figures[name]["samples"]) for name in figures} == counts
    assert all(s > 0 for figure in figures.values() for s in figure["samples"])
    assert figures["gateway matrix: 2 chats x 2 messages, message -> answered"]["extra"]["messages_per_s"] > 0
