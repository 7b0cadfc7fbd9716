"""bench/unattended.py runs end to end with tiny counts (its figures are printed, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import get_backend

REPO = Path(__file__).resolve().parents[2]


def test_the_unattended_benchmark_runs_with_tiny_counts(tmp_path: Path) -> None:
    get_backend("local")
    args = ["-n", "2", "--backend", "local", "--prompts", "2", "--scale", "1", "--scale-prompts", "1"]
    run = subprocess.run(
        [sys.executable, "-m", "bench.unattended", *args, "--sessions", "20", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    [path] = tmp_path.glob("*.json")
    figures = json.loads(path.read_text())["figures"]
    assert len(figures["scheduler: due time to the model's first request"]["samples"]) == 2
    assert figures["batch local: 2 prompts, 8 workers"]["extra"]["failed"] == 0
    assert figures["export sqlite: sharegpt over 20 sessions"]["samples"]
