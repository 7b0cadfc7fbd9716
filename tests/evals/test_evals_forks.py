"""Each task's environment is prepared once per run and every attempt starts from a fork of it: the
set-up's output (in the workdir and outside it) is in every attempt, what an attempt leaves is in none
of the others, and nothing of the preparation outlives the run."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import get_backend
from evals_kit import recorded

from backends import Backend
from control_plane.evals import Task, load_suite, load_task
from control_plane.evals.attempt import EVAL_LABEL, AttemptSetup, OracleAgent
from control_plane.evals.runner import EvalRunner

OUTSIDE = " && mkdir -p /outside && cp stamp /outside/stamp"
"""The set-up's files outside the workdir. Not on the Modal stand-in: its filesystem is the host's bar the
workdir, so only the workdir is its sandbox's own (a real Modal snapshot is the whole filesystem)."""
DOCKERFILE = (
    "FROM hermetic-sandbox:slim\nWORKDIR /app\nCOPY seed.txt /app/seed.txt\n"
    "RUN od -An -N8 -tx8 /dev/urandom > stamp{outside}\n"
)
SOLVE = (
    'cd /app\nfor p in {marks}; do [ -e $p ] && echo "seen $p"; done > leaks\n'
    'ls -A /app > listing\necho "stamp $(cat stamp)"\ntouch {marks}\n'
)
TEST = (
    "cd /app && cat leaks listing\n"
    "[ ! -s leaks ] && ! grep -q hermetic listing && {check}grep -qx seed seed.txt "
    "&& echo 1 > /logs/verifier/reward.txt\n"
)


def write_task(path: Path, outside: bool = True) -> Task:
    for sub in ("environment", "tests", "solution"):
        (path / sub).mkdir(parents=True)
    marks = "/app/mark /outside/mark /tmp/mark" if outside else "/app/mark"
    (path / "instruction.md").write_text("Leave marks.")
    (path / "environment" / "Dockerfile").write_text(DOCKERFILE.format(outside=OUTSIDE if outside else ""))
    (path / "environment" / "seed.txt").write_text("seed\n")
    (path / "solution" / "solve.sh").write_text(SOLVE.format(marks=marks))
    (path / "tests" / "test.sh").write_text(
        TEST.format(check="cmp stamp /outside/stamp && " if outside else "")
    )
    task = load_task(path)
    assert isinstance(task, Task), task
    return task


@pytest.mark.parametrize("name", ["docker", "local", "ssh", "modal-standin"])
def test_attempts_fork_the_prepared_environment_and_leak_nothing(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend: Backend = get_backend(name)
    made = recorded(backend, monkeypatch)
    run = f"forks-{uuid.uuid4().hex[:8]}"
    setup = AttemptSetup(backend=backend, agent=OracleAgent(), labels={EVAL_LABEL: run})
    runner = EvalRunner(setup, tmp_path / "out", attempts=3, workers=1)  # one at a time: a leak would show
    runner.run([write_task(tmp_path / "marks", outside=name != "modal-standin")])
    results = sorted(runner.results.read(), key=lambda r: r.attempt)
    logs = tmp_path / "out" / "logs" / "marks"
    assert [(r.reward, r.error) for r in results] == [(1.0, None)] * 3, [
        p.read_text() for p in sorted(logs.rglob("*.txt"))
    ]
    stamps = {(logs / str(n) / "agent.txt").read_text().strip() for n in (1, 2, 3)}
    assert len(stamps) == 1 and next(iter(stamps)).startswith("stamp "), "the set-up ran more than once"
    if name == "docker":  # the task's image is the prepared environment: a container per attempt
        assert len(made) == 3 and all(s.spec.from_snapshot is None for s in made)
    else:  # one sandbox ran the set-up; each attempt started from its snapshot
        snapshot = made[1].spec.from_snapshot
        assert len(made) == 4 and made[0].spec.from_snapshot is None and snapshot is not None
        assert {s.spec.from_snapshot for s in made[1:]} == {snapshot}
        assert [s.id for s in backend.snapshots.list() if (s.owner or "").startswith(f"eval:{run}")] == []
    assert all(s._closed for s in made), "the run ended with a sandbox still open"


def test_a_run_fans_out_on_modal_and_a_task_it_cannot_honour_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from modal_standin import FakeSandbox

    backend = get_backend("modal-standin")
    made = recorded(backend, monkeypatch)
    other = tmp_path / "suite" / "other-base"
    write_task(tmp_path / "suite" / "marks", outside=False)
    write_task(other, outside=False)
    (other / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN true\n")
    run = f"fans-{uuid.uuid4().hex[:8]}"
    setup = AttemptSetup(backend=backend, agent=OracleAgent(), labels={EVAL_LABEL: run})
    runner = EvalRunner(setup, tmp_path / "out", attempts=3, workers=3)
    runner.run(load_suite(tmp_path / "suite").tasks)
    found = {(r.task, r.attempt): (r.reward, r.error_class) for r in runner.results.read()}
    assert found == {
        **{("marks", n): (1.0, None) for n in (1, 2, 3)},
        **{("other-base", n): (0.0, "environment-error") for n in (1, 2, 3)},
    }
    refused = {r.error for r in runner.results.read() if r.task == "other-base"}
    assert refused == {
        "environment/Dockerfile line 1: FROM debian:bookworm-slim: the modal backend runs Hermetic's own "
        "image plus the task's files, not the task's image; run this task with --backend docker"
    }
    ours = [s for s in FakeSandbox.created if s.create_kwargs["tags"].get(EVAL_LABEL) == run]
    assert len(made) == len(ours) == 4, "one Modal sandbox for the set-up, then one per attempt"
    images = [repr(s.create_kwargs["image"]) for s in ours]
    assert len(set(images[1:])) == 1 and images[1].startswith("Image.from_id('im-") and images[0] != images[1]
    assert all(s.create_kwargs["block_network"] and s.create_kwargs["workdir"] == "/app" for s in ours)
    assert all(s.poll() is not None for s in ours), "a Modal sandbox outlived the run"
