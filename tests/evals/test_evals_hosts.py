"""Evaluation runs off docker (local bubblewrap, ssh): a task runs on the backend's own system plus its
files, with a root of its own for /tests and /logs; a Dockerfile that needs an image says so per task."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import get_backend
from evals_kit import recorded

from backends import Backend, Sandbox
from backends.local import LocalSandbox
from backends.ssh import SSHSandbox
from control_plane.evals import BUILTIN, AttemptResult, Task, load_suite, load_task
from control_plane.evals.attempt import EVAL_LABEL, AttemptSetup, EvalAgent, NopAgent, OracleAgent
from control_plane.evals.environment import TaskEnvironmentError
from control_plane.evals.host_environment import host_environment
from control_plane.evals.runner import EvalRunner

TASKS = ("text-log-errors", "git-merge-conflict", "python-fix-bug")
"""A file copied in, a RUN step making a repository from a script copied to /tmp, a directory copied."""


def run(backend: Backend, agent: EvalAgent, tasks: list[Task], out: Path) -> dict[str, AttemptResult]:
    setup = AttemptSetup(backend=backend, agent=agent, labels={EVAL_LABEL: "hosts"})
    runner = EvalRunner(setup, out, attempts=1, workers=2)
    runner.run(tasks)
    return {r.task: r for r in runner.results.read()}


def problems(results: dict[str, AttemptResult], reward: float) -> dict[str, object]:
    return {
        t: (r.reward, r.error_class, r.error) for t, r in results.items() if r.reward != reward or r.error
    }


@pytest.fixture(params=["local", "ssh"], scope="module")
def host(request: pytest.FixtureRequest) -> Backend:
    return get_backend(request.param)


@pytest.fixture
def opened(host: Backend, monkeypatch: pytest.MonkeyPatch) -> list[Sandbox]:
    """Every sandbox the test's runs create (other sessions on this host make their own meanwhile)."""
    return recorded(host, monkeypatch)


def workspace(sandbox: Sandbox) -> Path:
    """Where its files are on the host (the test sshd's host is this one)."""
    if isinstance(sandbox, LocalSandbox):
        return sandbox.dir
    assert isinstance(sandbox, SSHSandbox) and sandbox.workspace is not None
    return Path(sandbox.workspace)


def test_builtin_tasks_give_the_oracle_1_and_nop_0(
    host: Backend, opened: list[Sandbox], tmp_path: Path
) -> None:
    tasks = [t for t in load_suite(BUILTIN).tasks if t.id in TASKS]
    assert len(tasks) == len(TASKS)
    oracle = run(host, OracleAgent(), tasks, tmp_path / "oracle")
    assert sorted(oracle) == sorted(TASKS) and problems(oracle, 1.0) == {}
    nop = run(host, NopAgent(), tasks, tmp_path / "nop")
    assert sorted(nop) == sorted(TASKS) and problems(nop, 0.0) == {}
    assert len(opened) == 2 * len(TASKS)
    assert [s.id for s in opened if workspace(s).exists()] == [], "an attempt left its sandbox behind"


@pytest.fixture
def listener() -> Iterator[int]:
    """A port on the host's loopback: a sandbox with network none must not reach it."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield int(server.getsockname()[1])


def test_a_task_gets_its_files_env_and_steps_a_root_of_its_own_and_no_network(
    host: Backend, tmp_path: Path, listener: int
) -> None:
    suite = tmp_path / "suite"
    seen = write_task(
        suite / "seen",
        dockerfile="# files and set-up on the default image\nFROM hermetic-sandbox:slim\nWORKDIR /app\n"
        'ENV GREETING="hello there" \\\n    LEVEL=3\nCOPY data /app/data\nCOPY one.txt /task-files/\n'
        'RUN echo "$GREETING" > built && mkdir -p sub\nWORKDIR sub\nRUN ["sh", "-c", "pwd > /app/where"]\n'
        "CMD sleep infinity\n",
        solve=(
            "set -e\npwd > /app/start && cd /app\n(ls /tests 2>&1 || true) > visible\n"
            'echo "$GREETING/$LEVEL" > env\nwhoami > user\n'
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {listener}), 2)\" "
            "2> net || echo refused >> net\n"
        ),
        test=(
            "cd /app && head -v built where start env user visible net; grep -qx 'hello there' built "
            "&& grep -qx /app/sub where && grep -qx /app/sub start && [ -f data/a/b.txt ] "
            "&& [ -f /task-files/one.txt ] && grep -qx 'hello there/3' env && [ \"$(cat user)\" != root ] "
            "&& grep -q 'No such file' visible && grep -qx refused net "
            "&& echo 1 > /logs/verifier/reward.txt\n"
        ),
    )
    (seen / "environment" / "data" / "a").mkdir(parents=True)
    (seen / "environment" / "data" / "a" / "b.txt").write_text("b")
    (seen / "environment" / "one.txt").write_text("1")
    write_task(suite / "user", dockerfile="FROM hermetic-sandbox:slim\n\nUSER nobody\n")
    write_task(suite / "other-base", dockerfile="FROM debian:bookworm-slim\n")
    write_task(suite / "failing-step", dockerfile="FROM hermetic-sandbox:slim\nRUN echo broken && false\n")
    found = run(host, OracleAgent(), load_suite(suite).tasks, tmp_path / "out")
    log = tmp_path / "out" / "logs" / "seen" / "1" / "verifier.txt"
    assert (found["seen"].reward, found["seen"].error) == (1.0, None), log.exists() and log.read_text()
    refused = {name: (r.error_class, r.error or "") for name, r in found.items() if name != "seen"}
    assert {c for c, _ in refused.values()} == {"environment-error"}
    assert (
        f"Dockerfile line 3: USER: the {host.name} backend runs its own system, not an image"
        in refused["user"][1]
    )
    assert "line 1: FROM debian:bookworm-slim" in refused["other-base"][1]
    assert "--backend docker" in refused["other-base"][1]
    assert "line 2 exited 1 in the sandbox: broken" in refused["failing-step"][1]


def test_what_only_an_image_gives_is_refused_with_its_line(tmp_path: Path) -> None:
    cases = {
        "chown": ("COPY --chown=app data /app/", "line 2: COPY --chown=app: flags need docker"),
        "url": ("ADD https://example.com/x /app/", "line 2: ADD https://example.com/x: only the task's"),
        "archive": ("ADD data.tar.gz /app/", "ADD unpacks archives only on docker"),
        "outside": ("COPY ../task.toml /app/", "../task.toml: not a file in environment/"),
        "several": ("COPY data data /app", "several sources need a destination ending in /"),
        "mount": ("RUN --mount=type=cache,target=/x true", "line 2: RUN --mount=type=cache,target=/x"),
    }
    for name, (line, reason) in cases.items():
        task = write_task(tmp_path / name, dockerfile=f"FROM hermetic-sandbox\n{line}\n")
        (task / "environment" / "data").mkdir()
        (task / "environment" / "data.tar.gz").write_text("")
        with pytest.raises(TaskEnvironmentError) as refused:
            host_environment(read(task), "local")
        assert reason in str(refused.value), name
    image = write_task(tmp_path / "image")
    (image / "task.toml").write_text('[environment]\ndocker_image = "python:3.12"\n')
    with pytest.raises(TaskEnvironmentError, match="docker_image = python:3.12: the ssh backend"):
        host_environment(read(image), "ssh")


def write_task(path: Path, *, dockerfile: str | None = None, solve: str = "", test: str = "") -> Path:
    (path / "tests").mkdir(parents=True)
    (path / "solution").mkdir()
    (path / "instruction.md").write_text("Do it.")
    (path / "solution" / "solve.sh").write_text(solve or "true\n")
    (path / "tests" / "test.sh").write_text(test or "echo 1 > /logs/verifier/reward.txt\n")
    if dockerfile is not None:
        (path / "environment").mkdir()
        (path / "environment" / "Dockerfile").write_text(dockerfile)
    return path


def read(path: Path) -> Task:
    task = load_task(path)
    assert isinstance(task, Task), task
    return task
