"""Each task's environment is prepared once per run and every attempt starts from a fork of it: the
set-up's output (in the workdir and outside it) is in every attempt, what an attempt leaves is in none
of the others, and nothing of the preparation outlives the run."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from conftest import get_backend

from backends import Backend, Sandbox, SandboxSpec
from control_plane.evals import Task, load_task
from control_plane.evals.attempt import EVAL_LABEL, AttemptSetup, OracleAgent
from control_plane.evals.runner import EvalRunner

DOCKERFILE = (
    "FROM hermetic-sandbox:slim\nWORKDIR /app\nCOPY seed.txt /app/seed.txt\n"
    "RUN od -An -N8 -tx8 /dev/urandom > stamp && mkdir -p /outside && cp stamp /outside/stamp\n"
)
SOLVE = (
    "cd /app\nfor p in /app/mark /outside/mark /tmp/mark; do [ -e $p ] && echo \"seen $p\"; done > leaks\n"
    "ls -A /app > listing\necho \"stamp $(cat stamp)\"\ntouch /app/mark /outside/mark /tmp/mark\n"
)
TEST = (
    "cd /app && cat leaks listing\n"
    "[ ! -s leaks ] && ! grep -q hermetic listing && cmp stamp /outside/stamp && grep -qx seed seed.txt "
    "&& echo 1 > /logs/verifier/reward.txt\n"
)


def write_task(path: Path) -> Task:
    for sub in ("environment", "tests", "solution"):
        (path / sub).mkdir(parents=True)
    (path / "instruction.md").write_text("Leave marks.")
    (path / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (path / "environment" / "seed.txt").write_text("seed\n")
    (path / "solution" / "solve.sh").write_text(SOLVE)
    (path / "tests" / "test.sh").write_text(TEST)
    task = load_task(path)
    assert isinstance(task, Task), task
    return task


@pytest.mark.parametrize("name", ["docker", "local", "ssh"])
def test_attempts_fork_the_prepared_environment_and_leak_nothing(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend: Backend = get_backend(name)
    made: list[Sandbox] = []
    create = backend.create

    def recording(spec: SandboxSpec) -> Sandbox:
        made.append(create(spec))
        return made[-1]

    monkeypatch.setattr(backend, "create", recording)
    run = f"forks-{uuid.uuid4().hex[:8]}"
    setup = AttemptSetup(backend=backend, agent=OracleAgent(), labels={EVAL_LABEL: run})
    runner = EvalRunner(setup, tmp_path / "out", attempts=3, workers=1)  # one at a time: a leak would show
    runner.run([write_task(tmp_path / "marks")])
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
