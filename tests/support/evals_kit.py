"""Shared pieces of the evaluation tests: a suite in a profile's home, the sandboxes a backend made."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends import Backend, Sandbox, SandboxSpec


def suite_in_home(home: Path) -> None:
    for name, reward in (("passes", 1), ("fails", 0)):
        task = home / "evals" / "suites" / "mine" / name
        for sub in ("tests", "solution"):
            (task / sub).mkdir(parents=True)
        (task / "instruction.md").write_text("Do nothing much.")
        (task / "solution" / "solve.sh").write_text("true\n")
        (task / "tests" / "test.sh").write_text(f"echo {reward} > /logs/verifier/reward.txt\n")


def recorded(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> list[Sandbox]:
    """Every sandbox the backend creates from now on."""
    made: list[Sandbox] = []
    create = backend.create

    def recording(spec: SandboxSpec) -> Sandbox:
        made.append(create(spec))
        return made[-1]

    monkeypatch.setattr(backend, "create", recording)
    return made
