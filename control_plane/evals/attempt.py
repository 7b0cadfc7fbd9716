"""One attempt: a fresh sandbox from the task's image, the agent's turn (tests/ and solution/ not in the
sandbox yet), then the verifier in the same sandbox with its own timeout, and the reward it wrote."""

from __future__ import annotations

import logging
import shlex
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from backends import Backend, Sandbox, SandboxError, UnsupportedSpec

from .environment import TaskEnvironmentError
from .prepared import Environments
from .results import AttemptResult, ErrorClass
from .task import Task

log = logging.getLogger("hermetic.evals")

REWARD_FILE = "/logs/verifier/reward.txt"
EVAL_LABEL = "org.hermetic.eval"


@dataclass
class AgentOutcome:
    """What the agent's turn reports: its own error, and what it used."""

    error_class: ErrorClass | None = None
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    tool_calls: int = 0
    session_id: str | None = None
    log: list[str] = field(default_factory=list)


class EvalAgent(Protocol):
    def solve(self, task: Task, sandbox: Sandbox, workdir: str, attempt: int) -> AgentOutcome:
        """Work on the task in the sandbox until done or the task's agent timeout."""

    def scored(self, result: AttemptResult, run: str) -> None:
        """The attempt's result, verifier done, before it is written to results.jsonl."""


class NopAgent:
    """Does nothing: every verifier must give it 0."""

    def solve(self, task: Task, sandbox: Sandbox, workdir: str, attempt: int) -> AgentOutcome:
        return AgentOutcome()

    def scored(self, result: AttemptResult, run: str) -> None:
        """Nothing of it is kept but the result line."""


class OracleAgent(NopAgent):
    """Runs the task's solution/solve.sh: every verifier must give it 1."""

    def solve(self, task: Task, sandbox: Sandbox, workdir: str, attempt: int) -> AgentOutcome:
        if task.oracle is None:
            return AgentOutcome(
                "environment-error", "solution/solve.sh: missing; the oracle has nothing to run"
            )
        moved = place(sandbox, task.path / "solution")
        env = task.config.solution.env
        result = sandbox.run(
            f"{moved} && cd {shlex.quote(workdir)} && {_env(env)}bash /solution/solve.sh",
            session="agent",
            timeout=task.config.agent.timeout_sec,
        )
        outcome = AgentOutcome(log=[result.get("output", "")])
        if result.get("timed_out"):
            outcome.error_class = "agent-timeout"
            outcome.error = f"solve.sh ran past the agent timeout of {task.config.agent.timeout_sec:g}s"
        return outcome  # the verifier's set-up removes /solution


def place(sandbox: Sandbox, source: Path) -> str:
    """Upload a task's directory (solution/, tests/) to an unguessable place under /tmp (the runtime's
    file operations reach the workdir and /tmp on every backend); returns the command that moves it
    to /NAME, for the caller to run first (the sandbox's user may write at its root)."""
    stage = f"/tmp/.hermetic-{uuid.uuid4().hex}"
    sandbox.upload(source, stage)
    return f"rm -rf /{source.name} && mv {stage}/{source.name} /{source.name} && rm -rf {stage}"


@dataclass
class AttemptSetup:
    backend: Backend
    agent: EvalAgent
    labels: dict[str, str]
    network_full: bool = False
    logs: Path | None = None
    """Where each attempt's agent and verifier output go (DIR/logs/TASK/N/)."""
    on_sandbox: Callable[[Sandbox], None] = lambda sandbox: None
    release: Callable[[Sandbox], None] = Sandbox.close
    """What is done with an attempt's sandbox once it is scored (the runner removes it in the background)."""
    environments: Environments = field(init=False)
    """Each task's environment, prepared once (the image on docker, a set-up snapshot on local and ssh)."""

    def __post_init__(self) -> None:
        owner = f"eval:{self.labels.get(EVAL_LABEL, '')}"
        self.environments = Environments(self.backend, self.labels, self.network_full, owner)


def run_attempt(setup: AttemptSetup, task: Task, attempt: int) -> AttemptResult:
    """The whole attempt; every failure becomes the result's error class, never an exception."""
    started = time.monotonic()
    result = AttemptResult(
        task=task.id, attempt=attempt, reward=0.0, passed=False, duration_s=0.0, tags=task.tags
    )
    try:
        _attempt(setup, task, attempt, result)
    except (TaskEnvironmentError, UnsupportedSpec) as exc:  # the task asks what this backend lacks
        result.error_class, result.error = "environment-error", str(exc)
    except SandboxError as exc:
        result.error_class, result.error = "sandbox-error", f"{type(exc).__name__}: {exc}"
    result.duration_s = round(time.monotonic() - started, 3)
    return result


def _attempt(setup: AttemptSetup, task: Task, attempt: int, result: AttemptResult) -> None:
    prepared = setup.environments.prepare(task)
    workdir = prepared.workdir
    sandbox = setup.backend.create(prepared.spec)  # a fork of the prepared environment
    try:
        setup.on_sandbox(sandbox)
        prepared.start(sandbox, task)
        began = time.monotonic()
        outcome = setup.agent.solve(task, sandbox, workdir, attempt)
        result.agent_s = round(time.monotonic() - began, 3)
        for name in ("error_class", "error", "prompt_tokens", "completion_tokens", "cost", "tool_calls"):
            setattr(result, name, getattr(outcome, name))
        result.session_id = outcome.session_id
        _write_log(setup, task, attempt, "agent.txt", "\n".join(outcome.log))
        if outcome.error_class in ("environment-error", "model-error"):
            return
        began = time.monotonic()
        reward, problem, output = verify(sandbox, task, workdir)
        result.verifier_s = round(time.monotonic() - began, 3)
        _write_log(setup, task, attempt, "verifier.txt", output)
        result.reward, result.passed = reward, reward >= 1.0
        if problem is not None:
            result.error_class, result.error = problem
    finally:
        setup.release(sandbox)


def verify(sandbox: Sandbox, task: Task, workdir: str) -> tuple[float, tuple[ErrorClass, str] | None, str]:
    """Place tests/ at /tests, run test.sh, read the reward: (reward, problem, output). What the agent
    left at /tests, /solution or the reward file is removed first. One upload and one command: the
    reward comes back after an unguessable marker in the command's output."""
    marker = f"hermetic-reward-{uuid.uuid4().hex}"
    moved = place(sandbox, task.path / "tests")
    timeout = task.config.verifier.timeout_sec
    ran = sandbox.run(
        f"if rm -rf /tests /solution {REWARD_FILE} && mkdir -p /logs/verifier && {moved}; then "
        f"cd {shlex.quote(workdir)} && {_env(task.config.verifier.env)}bash /tests/test.sh; "
        f"__hermetic_status=$?; echo; if [ -f {REWARD_FILE} ]; then echo {marker}; cat {REWARD_FILE}; fi; "
        f"(exit $__hermetic_status); else echo {marker}-unprepared; false; fi",
        session="verifier",
        timeout=timeout,
    )
    text = str(ran.get("output", ""))
    if f"{marker}-unprepared" in text:
        raise SandboxError(f"cannot prepare the verifier: {text.split(marker)[0].strip()[-400:]}")
    before, found, written = text.rpartition(f"\n{marker}\n")
    output = before if found else text.removesuffix("\n")
    if ran.get("timed_out"):
        return 0.0, ("verifier-timeout", f"tests/test.sh ran past its timeout of {timeout:g}s"), output
    if not found:
        if ran.get("exit_code") == 0:  # Harbor's fallback: the exit status is the reward
            return 1.0, None, output
        return (
            0.0,
            ("verifier-error", f"tests/test.sh wrote no {REWARD_FILE} and exited {ran.get('exit_code')}"),
            output,
        )
    written = written.strip()
    try:
        reward = float(written)
    except ValueError:
        reward = -1.0
    if not 0.0 <= reward <= 1.0:
        return (
            0.0,
            ("verifier-error", f"{REWARD_FILE} holds {written[:40]!r}, not a number from 0 to 1"),
            output,
        )
    return reward, None, output


def _env(env: dict[str, str]) -> str:
    if not env:
        return ""
    return "env " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " "


def _write_log(setup: AttemptSetup, task: Task, attempt: int, name: str, text: str) -> None:
    if setup.logs is None:
        return
    directory = setup.logs / task.id / str(attempt)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_text(text, encoding="utf-8")
