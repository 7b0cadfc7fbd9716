"""`hermetic eval` as a user runs it: a run killed with -9 and resumed (nothing finished redone, no sandbox
left behind), the summary and table, a comparison of two runs, and input that cannot run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker
import pytest
from conftest import get_backend
from hermetic_cli import hermetic
from typer.testing import CliRunner

from control_plane.cli.main import app


def env_for(root: Path) -> dict[str, str]:
    """This process's environment without HERMETIC_* settings, the profile home under `root`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    return {**clean, "HERMETIC_ROOT": str(root / "home"), "COLUMNS": "200"}


def slow_suite(root: Path, prefix: str, n: int) -> Path:
    """n tasks whose oracle takes a second; odd ones fail their verifier."""
    for i in range(n):
        task = root / f"{prefix}-{i}"
        for sub in ("tests", "solution"):
            (task / sub).mkdir(parents=True)
        (task / "instruction.md").write_text("Write done.")
        (task / "task.toml").write_text(f'[metadata]\ntags = ["{"even" if i % 2 == 0 else "odd"}"]\n')
        (task / "solution" / "solve.sh").write_text("sleep 1; touch /app/done\n")
        want = "1" if i % 2 == 0 else "0"
        (task / "tests" / "test.sh").write_text(
            f"if [ -f /app/done ]; then echo {want}; else echo 0; fi > /logs/verifier/reward.txt\n"
        )
    return root


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_run_killed_mid_way_resumes_without_redoing_or_leaving_sandboxes(tmp_path: Path) -> None:
    get_backend("docker")
    env = env_for(tmp_path)
    prefix = f"resume{uuid.uuid4().hex[:6]}"
    suite = slow_suite(tmp_path / "suite", prefix, 4)
    out = tmp_path / "out"
    command = ["eval", "run", str(suite), "--agent", "oracle", "-k", "2", "-w", "2", "--out", str(out)]
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(
        [sys.executable, "-m", "control_plane", *command], env=env, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(lines(out / "results.jsonl")) < 2:
            assert first.poll() is None, (tmp_path / "first.log").read_text()
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)  # a crash: no cleanup
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    before = (out / "results.jsonl").read_text()
    done_before = {(r["task"], r["attempt"]) for r in lines(out / "results.jsonl")}
    assert 2 <= len(done_before) < 8

    second = hermetic("eval", "run", "--resume", str(out), env=env)
    assert second.returncode == 1, second.stderr  # the odd tasks fail, by design
    assert (out / "results.jsonl").read_text().startswith(before)  # what finished was kept as it was
    final = lines(out / "results.jsonl")
    pairs = [(r["task"], r["attempt"]) for r in final]
    assert sorted(pairs) == sorted((f"{prefix}-{i}", n) for i in range(4) for n in (1, 2))  # each once
    client = docker.from_env()
    left = [
        c.name
        for c in client.containers.list(all=True, filters={"label": "org.hermetic.task"})
        if str(c.labels.get("org.hermetic.task", "")).startswith(prefix)
    ]
    assert left == []  # the killed run's sandboxes were reaped when the resumed run started
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"]["pass_at_1"] == 0.5 and summary["overall"]["attempts"] == 8
    assert summary["per_tag"]["even"]["pass_at_k"] == 1.0 and summary["per_tag"]["odd"]["passed"] == 0
    assert f"{prefix}-0" in second.stdout and "pass@2" in second.stdout and "overall" in second.stdout

    nop = hermetic("eval", "run", str(suite), "--agent", "nop", "--out", str(tmp_path / "nop"), env=env)
    assert nop.returncode == 1
    compared = hermetic("eval", "compare", str(tmp_path / "nop"), str(out), env=env)
    assert compared.returncode == 0, compared.stderr
    assert "B-A mean reward +0.500" in compared.stdout and "paired bootstrap" in compared.stdout


def test_input_that_cannot_run_is_refused_plainly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMETIC_ROOT", str(tmp_path / "home"))
    monkeypatch.delenv("HERMETIC_PROFILE", raising=False)
    runner = CliRunner()

    def refused(*args: str) -> str:
        done = runner.invoke(app, ["eval", *args])
        assert done.exit_code == 2, done.output
        return " ".join(done.output.split())  # rich wraps long lines at the terminal's width

    out = str(tmp_path / "o")
    assert "no-suite: no such file or directory" in refused("run", str(tmp_path / "no-suite"), "--out", out)
    assert "not an evaluation run's directory" in refused("run", "--resume", str(tmp_path))
    assert "unknown agent 'gpt'" in refused("run", str(tmp_path), "--agent", "gpt", "--out", out)
    assert "allows 8 sandboxes at once" in refused("run", str(tmp_path), "-w", "9", "--out", out)
    write_task_dir = slow_suite(tmp_path / "one", "t", 1)
    assert "needs a model" in refused("run", str(write_task_dir), "--out", out)  # hermetic is the default
    assert "it needs --learning on" in refused("run", str(write_task_dir), "--into-profile", "--out", out)
    assert "no results.jsonl" in refused("compare", str(tmp_path), str(tmp_path))
