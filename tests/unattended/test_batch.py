"""`hermetic batch run` as a user runs it (a subprocess) against a model server that answers each
conversation by its own state, so parallel workers get consistent replies: a crash mid-batch and
`--resume` on Docker, timeouts, the iteration budget, and bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend
from hermetic_cli import scripted_env
from per_conversation import PerConversation

from control_plane.batch import finished_ids
from control_plane.models.fake_llm import FakeLLM, Turn
from control_plane.store import Store


@pytest.fixture
def model() -> Iterator[PerConversation]:
    with PerConversation(delay=0.15) as server:
        yield server


def prompts_file(path: Path, n: int) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": f"p{i:02d}", "prompt": f"say p{i:02d}", "category": "echo"}) + "\n"
            for i in range(n)
        )
    )
    return path


def batch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "control_plane", "batch", "run", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def user_prompts(model: FakeLLM) -> list[str]:
    return [r["messages"][-1]["content"] for r in model.requests if r["messages"][-1]["role"] == "user"]


def results(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_twenty_prompts_on_docker_survive_a_crash_and_resume_without_redoing(
    tmp_path: Path, model: PerConversation
) -> None:
    get_backend("docker")
    env = scripted_env(tmp_path, model.url, HERMETIC_BACKEND="docker", COLUMNS="120")
    prompts = prompts_file(tmp_path / "prompts.jsonl", 20)
    out = tmp_path / "out"
    log = (tmp_path / "first.log").open("w")
    command = ["batch", "run", str(prompts), "--workers", "4", "--out", str(out)]
    first = subprocess.Popen(
        [sys.executable, "-m", "control_plane", *command], env=env, stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 300
        lines = out / "results.jsonl"
        while time.monotonic() < deadline and (not lines.exists() or len(lines.read_text().splitlines()) < 5):
            assert first.poll() is None, (tmp_path / "first.log").read_text()
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)  # a crash: no cleanup, no last words
        first.wait(30)
        log.close()
        before = {r["id"] for r in results(lines) if r["status"] == "completed"}
        assert 5 <= len(before) < 20
        asked_before = len(model.requests)

        second = batch(str(prompts), "--workers", "4", "--out", str(out), "--resume", env=env)
        assert second.returncode == 0, second.stderr
        assert "done before" in second.stderr and f"{20 - len(before)} completed" in second.stderr
    finally:
        if first.poll() is None:
            first.kill()
        _remove_sandboxes_of(tmp_path)
    final = results(out / "results.jsonl")
    completed = [r for r in final if r["status"] == "completed"]
    assert sorted(r["id"] for r in completed) == [f"p{i:02d}" for i in range(20)]
    assert len(completed) == len({r["id"] for r in completed})  # nothing twice
    redone = [p for p in user_prompts(model)[asked_before:] if p.split()[-1] in before]
    assert redone == []  # what finished before the crash was not asked again
    for r in completed:
        assert r["final"].startswith("answer: ") and f"ran {r['id']}" in r["final"]
        assert r["tool_calls"] == 1 and r["prompt_tokens"] > 0 and r["completion_tokens"] > 0
        assert r["category"] == "echo" and r["session_id"].startswith("s-")
    with Store(f"sqlite:///{tmp_path}/hermetic.db") as store:
        sandboxes = {c.sandbox_id for r in completed for c in store.tool_calls(r["session_id"])}
        sources = {store.get_session(r["session_id"], "default").source for r in completed}  # type: ignore[union-attr]
    assert len(sandboxes) == 20 and sources == {"batch"}  # each prompt its own session and sandbox
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 20 - len(before) and summary["skipped"] == len(before)
    assert summary["tool_calls"] == 20 - len(before)


def _remove_sandboxes_of(root: Path) -> None:
    """The killed run's containers (its sessions' labels): nobody else's."""
    import docker

    with Store(f"sqlite:///{root}/hermetic.db") as store:
        sessions = {s.id for s in store.list_sessions("default", limit=1000)}
    client = docker.from_env()
    for container in client.containers.list(all=True, filters={"label": "org.hermetic.session"}):
        if container.labels.get("org.hermetic.session") in sessions:
            container.remove(force=True)


def test_timeouts_and_the_iteration_budget_are_results_and_the_summary_counts_them(tmp_path: Path) -> None:
    get_backend("local")
    with PerConversation(delay=3.0, tool_first=False) as slow:
        env = scripted_env(tmp_path, slow.url, HERMETIC_BACKEND="local", COLUMNS="120")
        timed = batch(
            str(prompts_file(tmp_path / "a.jsonl", 2)),
            "--timeout",
            "1",
            "--out",
            str(tmp_path / "a"),
            env=env,
        )
    assert timed.returncode == 1 and "timeout 2" in timed.stderr
    assert {r["status"] for r in results(tmp_path / "a" / "results.jsonl")} == {"timeout"}
    with PerConversation() as looping:
        env = scripted_env(tmp_path, looping.url, HERMETIC_BACKEND="local", COLUMNS="120")
        budget = batch(
            str(prompts_file(tmp_path / "b.jsonl", 3)),
            "--max-iterations",
            "1",
            "--workers",
            "3",
            "--out",
            str(tmp_path / "b"),
            env=env,
        )
    assert budget.returncode == 1 and "budget 3" in budget.stderr
    assert all(
        r["status"] == "budget" and r["final"] == "" for r in results(tmp_path / "b" / "results.jsonl")
    )


def test_bad_prompt_files_and_unfinished_results_are_refused_with_the_reason(tmp_path: Path) -> None:
    env = scripted_env(tmp_path, "http://127.0.0.1:9/v1", HERMETIC_BACKEND="local", COLUMNS="120")
    bad = tmp_path / "bad.jsonl"
    for text, message in [
        ('{"prompt": "ok"}\n{"prompt": \n', "bad.jsonl:2: not JSON"),
        ('{"prompt": "ok", "id": "a"}\n{"prompt": "again", "id": "a"}\n', "used twice"),
        ('{"prompt": ""}\n', "bad.jsonl:1"),
        ('{"prompt": "x", "toolsets": ["warp"]}\n', "unknown toolset"),
        ("\n", "no prompts"),
    ]:
        bad.write_text(text)
        done = batch(str(bad), env=env)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr
    out = tmp_path / "kept"
    out.mkdir()
    (out / "results.jsonl").write_text('{"id": "p00", "status": "completed"}\n')
    done = batch(str(prompts_file(tmp_path / "p.jsonl", 1)), "--out", str(out), env=env)
    assert done.returncode == 2 and "--resume" in done.stderr
    assert (out / "results.jsonl").read_text() == '{"id": "p00", "status": "completed"}\n'  # untouched


def test_a_result_line_torn_by_a_crash_is_cut_off_and_its_prompt_runs_again(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text('{"id": "a", "status": "completed"}\n{"id": "b", "status": "failed"}\n{"id": "c", "sta')
    assert finished_ids(path) == {"a"}  # failed ones run again; the torn one never finished
    assert path.read_text().endswith('"failed"}\n')


def test_on_modal_the_workers_fan_out_to_one_modal_sandbox_per_prompt(tmp_path: Path) -> None:
    """The real Modal backend against the stand-in of Modal's service (in-process: the CLI's subprocess
    cannot be handed it): each prompt gets its own Modal sandbox, never more at once than workers."""
    import asyncio

    from modal_standin import FakeSandbox

    from control_plane.agent.agent import Agent
    from control_plane.batch import BatchItem, BatchRunner
    from control_plane.config.settings import load_settings
    from control_plane.sandbox_manager import SandboxManager

    backend = get_backend("modal-standin")
    alive: list[int] = []

    class Counting(PerConversation):
        def _next(self, body: dict[str, Any]) -> tuple[int, Turn | None]:
            alive.append(sum(1 for sb in FakeSandbox.created[start:] if sb.poll() is None))
            return super()._next(body)

    start = len(FakeSandbox.created)
    with Counting(delay=0.1) as server:
        model = {"name": "openai/scripted", "api_base": server.url, "api_key": "k-123456", "retries": 0}
        settings = load_settings(root=tmp_path, model=model, backend="modal", learning={"enabled": False})
        agent = Agent(settings, sandboxes=SandboxManager(settings, backend=lambda: backend))
        runner = BatchRunner(agent, tmp_path / "results.jsonl", workers=4, timeout=120)
        try:
            summary = asyncio.run(runner.run([BatchItem(id=f"m{i}", prompt=f"say m{i}") for i in range(8)]))
        finally:
            agent.close()
    assert summary.completed == 8 and summary.tool_calls == 8
    made = FakeSandbox.created[start:]
    assert len(made) == 8 and all(sb.poll() is not None for sb in made)  # one each, all terminated after
    assert max(alive) <= 4
    assert {r["id"] for r in results(tmp_path / "results.jsonl")} == {f"m{i}" for i in range(8)}
