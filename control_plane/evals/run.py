"""A run as a user starts it: the record (run.json) in DIR, the suite loaded and filtered, the agent and
the backend chosen, the runner; and the summary written when it ends. Surfaces (CLI) call this."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends import Backend

from ..config.settings import Settings, load_settings
from ..sandbox_manager import choose_backend, snapshot_store
from .attempt import EVAL_LABEL, AttemptSetup, EvalAgent, NopAgent, OracleAgent
from .hermetic import HermeticAgent
from .metrics import Summary, summarize
from .results import RunRecord
from .runner import EvalRunner
from .suite import Filters, Suite, SuiteError, load_suite, resolve

RECORD, SUMMARY = "run.json", "summary.json"


class RunError(ValueError):
    """The run cannot start: a bad directory, a missing suite, an agent that is not here."""


@dataclass
class EvalRun:
    record: RunRecord
    out: Path
    suite: Suite
    backend: Backend
    runner: EvalRunner

    def close(self) -> None:
        """Let the agent finish what it does after a run (a learning review), then let it go."""
        close = getattr(self.runner.setup.agent, "close", None)
        if close is not None:
            close()

    def summary(self) -> Summary:
        unreadable = {e.id: f"{e.file}: {e.reason}" for e in self.suite.errors}
        summary = summarize(self.runner.results.read(), self.record.attempts, unreadable)
        (self.out / SUMMARY).write_text(summary.model_dump_json(indent=2) + "\n")
        return summary


def record_for_resume(out: Path) -> RunRecord:
    try:
        return RunRecord.model_validate(json.loads((out / RECORD).read_text()))
    except FileNotFoundError:
        raise RunError(f"{out}: no {RECORD} here: not an evaluation run's directory") from None
    except ValueError as exc:
        raise RunError(f"{out / RECORD}: unreadable ({exc})") from None


def open_run(
    record: RunRecord, out: Path, *, resume: bool, workers: int, settings: Settings | None = None
) -> EvalRun:
    """Check and prepare everything; raises RunError (nothing started) or BackendUnavailable. The
    hermetic agent uses `settings` (an API server's profile), else the record's profile's."""
    results = out / "results.jsonl"
    if not resume and results.exists() and results.stat().st_size:
        raise RunError(f"{results} already has results: --resume {out} continues it, or choose another --out")
    try:
        profile = settings or load_settings(record.profile)
    except ValueError as exc:
        raise RunError(f"the profile's settings: {exc}") from None
    try:
        suite = load_suite(
            resolve(record.suite, taps=profile.home / "skills"),
            Filters(tuple(record.include), tuple(record.exclude), tuple(record.tags)),
        )
    except SuiteError as exc:
        raise RunError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    chosen = _agent(record, out, settings)
    (out / RECORD).write_text(record.model_dump_json(indent=2) + "\n")
    backend, _ = choose_backend(profile, record.backend)  # the profile's ssh host, local state dir
    backend.snapshots = snapshot_store(profile)  # the tasks' prepared environments, listed as the profile's
    setup = AttemptSetup(
        backend=backend,
        agent=chosen,
        labels={EVAL_LABEL: uuid.uuid4().hex[:12]},
        network_full=record.network_full,
    )
    runner = EvalRunner(setup, out, attempts=record.attempts, workers=workers)
    return EvalRun(record=record, out=out, suite=suite, backend=backend, runner=runner)


def _agent(record: RunRecord, out: Path, given: Settings | None) -> EvalAgent:
    if record.into_profile and (record.agent != "hermetic" or record.learning != "on"):
        raise RunError("--into-profile keeps what the hermetic agent learns: it needs --learning on")
    if record.agent == "oracle":
        return OracleAgent()
    if record.agent == "nop":
        return NopAgent()
    overrides: dict[str, Any] = {"backend": record.backend}
    if record.toolsets is not None:
        overrides["toolsets"] = record.toolsets
    if record.model:
        overrides["model"] = {"name": record.model}
        if given is not None:
            overrides["model"] = given.model.model_copy(update={"name": record.model})
    try:
        settings = given.model_copy(update=overrides) if given else load_settings(record.profile, **overrides)
    except ValueError as exc:
        raise RunError(f"the profile's settings: {exc}") from None
    if record.max_iterations is not None:
        settings = settings.model_copy(
            update={"limits": settings.limits.model_copy(update={"max_iterations": record.max_iterations})}
        )
    if not settings.model.name:
        raise RunError("the hermetic agent needs a model: pass --model or configure one (hermetic model set)")
    seed = settings.home if record.learning == "frozen" else None
    return HermeticAgent(settings, out, record.learning, seed, into_profile=record.into_profile)
