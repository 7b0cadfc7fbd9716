"""A run as a user starts it: the record (run.json) in DIR, the suite loaded and filtered, the agent and
the backend chosen, the runner; and the summary written when it ends. Surfaces (CLI) call this."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from backends import Backend, create_backend

from .attempt import EVAL_LABEL, AttemptSetup, EvalAgent, NopAgent, OracleAgent
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
    record: RunRecord, out: Path, *, resume: bool, workers: int, agent: EvalAgent | None = None
) -> EvalRun:
    """Check and prepare everything; raises RunError (nothing started) or BackendUnavailable."""
    results = out / "results.jsonl"
    if not resume and results.exists() and results.stat().st_size:
        raise RunError(f"{results} already has results: --resume {out} continues it, or choose another --out")
    try:
        suite = load_suite(
            resolve(record.suite), Filters(tuple(record.include), tuple(record.exclude), tuple(record.tags))
        )
    except SuiteError as exc:
        raise RunError(str(exc)) from None
    chosen = agent or _agent(record)
    out.mkdir(parents=True, exist_ok=True)
    (out / RECORD).write_text(record.model_dump_json(indent=2) + "\n")
    backend = create_backend(record.backend)
    setup = AttemptSetup(
        backend=backend,
        agent=chosen,
        labels={EVAL_LABEL: uuid.uuid4().hex[:12]},
        network_full=record.network_full,
    )
    runner = EvalRunner(setup, out, attempts=record.attempts, workers=workers)
    return EvalRun(record=record, out=out, suite=suite, backend=backend, runner=runner)


def _agent(record: RunRecord) -> EvalAgent:
    return OracleAgent() if record.agent == "oracle" else NopAgent()
