"""The benchmark's entry point runs end to end with tiny iteration counts (figures are never asserted:
timings belong to bench/, not to tests). The peers are left out: installing them is the benchmark's
own setup, from PyPI, and tests/project/test_bench_peers.py covers their runners."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_benchmark_runs_with_tiny_counts_and_writes_its_samples(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "-n",
            "3",
            "--backends",
            "local,docker",
            "--skip",
            "peers",
            "--concurrency",
            "2",
            "--store",
            "sqlite",
            "--store-messages",
            "300",
            "--bulk-mb",
            "2",
            "--out",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    [path] = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    figures = data["figures"]
    for name in (
        "floor: persistent bash over a pipe",
        "floor: persistent bash over one docker exec stream",
        "hermetic local: `true` round trip",
        "hermetic docker: create to first command",
        "hermetic docker: 1 MB file write+read",
        "hermetic docker: warm-pool acquire to first command",
        "hermetic local: 2 sandboxes x 20 commands",
        "hermetic docker: navigate + ARIA snapshot, local page",
        "hermetic docker: first navigation of a session, warm pool, browser up",
        "hermetic docker: agent step overhead (scripted model, `true` tool)",
        "floor: raw httpx POST to the scripted model (agent step run, docker)",
        "store sqlite: session_search tool, two words (3 sessions, window and edges)",
        "hermetic docker: skill verification, trivial skill, warm pool",
        "hermetic docker: skill verification, trivial skill, fresh sandbox",
        "hermetic local: first navigation of a session, warm pool, browser up",
        "egress: connection set-up, through the proxy",
        "expose: request round trip, through the exposure",
    ):
        assert name in figures, f"{name} missing from {sorted(figures)}"
        assert figures[name]["samples"] and all(s > 0 for s in figures[name]["samples"])
    assert figures["hermetic local: 2 sandboxes x 20 commands"]["extra"]["failed"] == 0
    assert len(data["extra"]["cpu_loop_ms"]) == 2
    targets = {row["target"]: row for row in data["extra"]["targets"]}
    assert targets["local round trip within 5x of persistent bash over a pipe"]["met"] in (True, False)
    assert targets["docker agent step overhead within 2x of a raw POST to the model (issue 38)"]["met"] in (
        True,
        False,
    )
    assert "Targets (medians of this run)" in run.stdout and "CPU noise loop" in run.stdout
