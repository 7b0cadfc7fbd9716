"""The words of an evaluation run: one attempt's result (a line of results.jsonl), its error classes,
and the run's record (run.json) that `--resume` continues from."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

ErrorClass = Literal[
    "agent-timeout",
    "verifier-timeout",
    "verifier-error",
    "environment-error",
    "model-error",
    "sandbox-error",
]
INFRASTRUCTURE: frozenset[str] = frozenset({"environment-error", "sandbox-error", "verifier-error"})
"""Failures of the task or the machine, not the agent: counted apart, left out of the agent's scores."""
AgentName = Literal["hermetic", "oracle", "nop"]
Learning = Literal["off", "on", "frozen"]


class AttemptResult(BaseModel):
    """One line of results.jsonl."""

    task: str
    attempt: int
    reward: float
    """0..1, from /logs/verifier/reward.txt (the verifier's exit status when it wrote none)."""
    passed: bool
    """reward == 1."""
    duration_s: float
    agent_s: float = 0.0
    verifier_s: float = 0.0
    tags: list[str] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    tool_calls: int = 0
    session_id: str | None = None
    error_class: ErrorClass | None = None
    error: str | None = None

    @property
    def infrastructure(self) -> bool:
        return self.error_class in INFRASTRUCTURE


class RunRecord(BaseModel):
    """run.json: what was asked, so `--resume DIR` runs the same thing."""

    suite: str
    agent: AgentName
    attempts: int
    backend: str
    include: list[str] = []
    exclude: list[str] = []
    tags: list[str] = []
    network_full: bool = False
    model: str | None = None
    """hermetic: the litellm model id (default: the profile's)."""
    learning: Learning = "off"
    """hermetic: off, on (the run's own home learns across attempts), frozen (a copy of `profile`'s)."""
    profile: str | None = None
    """hermetic: the profile whose settings (and, frozen, memory and skills) the agent starts from."""
    into_profile: bool = False
    """hermetic, learning on: learn in `profile`'s own home (start from its memory and skills and keep
    what the run learned there) instead of a home of the run's own."""
    toolsets: list[str] | None = None
    """hermetic: the tool groups the model sees (default: the profile's)."""
    max_iterations: int | None = None
    """hermetic: most model calls per attempt (default: the profile's limits.max_iterations)."""


class ResultsFile:
    """results.jsonl, appended one whole line at a time: kill -9 loses at most the attempts in flight."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def read(self) -> list[AttemptResult]:
        """Every complete line; a torn last line (a crash mid-write) is skipped."""
        if not self.path.exists():
            return []
        found = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                found.append(AttemptResult.model_validate(json.loads(line)))
            except (ValueError, ValidationError):
                continue
        return found

    def append(self, result: AttemptResult) -> None:
        with self._lock, self.path.open("a+b") as out:
            out.seek(0, 2)
            if out.tell():  # after a torn line, start a new one
                out.seek(-1, 2)
                if out.read(1) != b"\n":
                    out.write(b"\n")
            out.write(result.model_dump_json().encode() + b"\n")
            out.flush()
