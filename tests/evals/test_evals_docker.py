"""Evaluation runs on docker: the built-in suite proven by its oracle (every verifier gives the oracle 1 and
nop 0), the privileges of a task's container, and each kind of bad task as its own clear error."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import get_backend
from netns import Upstream

from backends import Backend
from control_plane.evals import BUILTIN, AttemptResult, Task, load_suite
from control_plane.evals.attempt import EVAL_LABEL, AttemptSetup, EvalAgent, NopAgent, OracleAgent
from control_plane.evals.runner import EvalRunner

RUN = f"test-{uuid.uuid4().hex[:8]}"
"""This test run's label on its sandboxes: another run's never count as left behind by this one."""


@pytest.fixture(scope="module")
def docker() -> Iterator[Backend]:
    backend = get_backend("docker")
    yield backend
    leftover = backend.client.containers.list(all=True, filters={"label": f"{EVAL_LABEL}={RUN}"})  # type: ignore[attr-defined]
    assert leftover == [], "an attempt left its sandbox behind"


def run(
    backend: Backend, agent: EvalAgent, tasks: list[Task], out: Path, workers: int = 4
) -> dict[str, AttemptResult]:
    setup = AttemptSetup(backend=backend, agent=agent, labels={EVAL_LABEL: RUN})
    runner = EvalRunner(setup, out, attempts=1, workers=workers)
    runner.run(tasks)
    return {r.task: r for r in runner.results.read()}


def test_every_builtin_task_gives_the_oracle_1_and_nop_0(
    docker: Backend,
    upstream: Upstream,
    tmp_path: Path,
) -> None:
    shutil.copy(BUILTIN / "net-fetch-allowed" / "upstream" / "inventory.csv", upstream.root / "www")
    suite = load_suite(BUILTIN)
    oracle = run(docker, OracleAgent(), suite.tasks, tmp_path / "oracle")
    wrong = {
        t: (r.reward, r.error_class, r.error) for t, r in oracle.items() if r.reward != 1.0 or r.error_class
    }
    assert sorted(oracle) == sorted(t.id for t in suite.tasks) and wrong == {}
    nop = run(docker, NopAgent(), suite.tasks, tmp_path / "nop")
    wrong = {
        t: (r.reward, r.error_class, r.error) for t, r in nop.items() if r.reward != 0.0 or r.error_class
    }
    assert len(nop) == len(suite.tasks) and wrong == {}
    log = (tmp_path / "oracle" / "logs" / "text-word-frequency" / "1" / "verifier.txt").read_text()
    assert "Traceback" not in log


def test_the_agent_works_as_root_with_docker_defaults_but_sealed(docker: Backend, tmp_path: Path) -> None:
    task = tmp_path / "suite" / "privileges"
    (task / "tests").mkdir(parents=True)
    (task / "solution").mkdir()
    (task / "instruction.md").write_text("Report what you are.")
    (task / "solution" / "solve.sh").write_text(
        "set -e\nid -u > /app/uid\ngrep -E '^(CapEff|NoNewPrivs)' /proc/self/status > /app/status\n"
        "apt-get --version > /dev/null && touch /usr/local/bin/written-by-root\n"
        "ls /tests /solution/solve.sh > /app/visible 2>&1 || true\n"
        "ls /sys/class/net > /app/net\n"
        "test -S /var/run/docker.sock && echo socket > /app/docker || echo none > /app/docker\n"
    )
    (task / "tests" / "test.sh").write_text(
        "cd /app && cat uid status visible net docker > /logs/verifier/seen\n"
        "[ \"$(cat uid)\" = 0 ] && grep -q 'NoNewPrivs:\t1' status "
        "&& ! grep -q 'CapEff:\t0000000000000000' status && [ -e /usr/local/bin/written-by-root ] "
        "&& grep -q 'No such file' visible && [ \"$(cat net)\" = lo ] "
        '&& [ "$(cat docker)" = none ] && echo 1 > /logs/verifier/reward.txt\n'
    )
    found = run(docker, OracleAgent(), load_suite(task).tasks, tmp_path / "out")["privileges"]
    logs = tmp_path / "out" / "logs" / "privileges" / "1"
    assert (found.reward, found.error_class) == (1.0, None), [p.read_text() for p in logs.iterdir()]


BAD_TASKS = {
    "no-reward": (
        "FROM hermetic-sandbox:slim\n",
        "echo checking; exit 2\n",
        "[verifier]\ntimeout_sec = 20\n",
    ),
    "hangs": ("FROM hermetic-sandbox:slim\n", "sleep 600\n", "[verifier]\ntimeout_sec = 2\n"),
    "build-fails": (
        "FROM hermetic-sandbox:slim\nRUN echo no-such-step && exit 3\n",
        "echo 1 > /logs/verifier/reward.txt\n",
        "",
    ),
    "no-base": ("FROM hermetic-nothing:here\n", "echo 1 > /logs/verifier/reward.txt\n", ""),
    "bad-reward": ("FROM hermetic-sandbox:slim\n", "echo lots > /logs/verifier/reward.txt\n", ""),
    "exit-status": ("FROM hermetic-sandbox:slim\n", "true\n", ""),
    "good": (
        "FROM hermetic-sandbox:slim\nWORKDIR /srv\n",
        "[ -f /srv/done ] && echo 1 > /logs/verifier/reward.txt\n",
        "",
    ),
    "internet": (
        "FROM hermetic-sandbox:slim\n",
        "echo 1 > /logs/verifier/reward.txt\n",
        "[environment]\nallow_internet = true\n",
    ),
}


def test_each_bad_task_is_its_own_clear_error_and_the_run_goes_on(docker: Backend, tmp_path: Path) -> None:
    root = tmp_path / "suite"
    for name, (dockerfile, verifier, toml) in BAD_TASKS.items():
        task = root / name
        for sub in ("environment", "tests", "solution"):
            (task / sub).mkdir(parents=True)
        (task / "instruction.md").write_text(f"Task {name}.")
        (task / "task.toml").write_text(toml)
        (task / "environment" / "Dockerfile").write_text(dockerfile)
        (task / "tests" / "test.sh").write_text(verifier)
        (task / "solution" / "solve.sh").write_text("touch done\n")
    (root / "no-instruction" / "tests").mkdir(parents=True)
    (root / "no-instruction" / "tests" / "test.sh").write_text("exit 0\n")
    suite = load_suite(root)
    assert [(e.id, e.file) for e in suite.errors] == [("no-instruction", "instruction.md")]
    found = run(docker, OracleAgent(), suite.tasks, tmp_path / "out", workers=3)
    outcome = {name: (r.reward, r.error_class) for name, r in found.items()}
    assert outcome == {
        "no-reward": (0.0, "verifier-error"),
        "hangs": (0.0, "verifier-timeout"),
        "build-fails": (0.0, "environment-error"),
        "no-base": (0.0, "environment-error"),
        "bad-reward": (0.0, "verifier-error"),
        "exit-status": (1.0, None),  # no reward written, exit 0: Harbor's fallback
        "good": (1.0, None),
        "internet": (0.0, "environment-error"),
    }
    errors = {name: r.error or "" for name, r in found.items()}
    assert "wrote no /logs/verifier/reward.txt and exited 2" in errors["no-reward"]
    assert "past its timeout of 2s" in errors["hangs"]
    assert (
        "environment/Dockerfile: the build failed" in errors["build-fails"]
        and "no-such-step" in errors["build-fails"]
    )
    assert "base image hermetic-nothing:here is not present here and is never pulled" in errors["no-base"]
    assert "'lots', not a number from 0 to 1" in errors["bad-reward"]
    assert "--network full" in errors["internet"]
    assert "checking" in (tmp_path / "out" / "logs" / "no-reward" / "1" / "verifier.txt").read_text()
