"""Evaluation runs over HTTP (the same runs as `hermetic eval run`, for the caller's profile): start one,
follow its attempts as server-sent events, read its status, results and summary. Runs live in the
profile's home (evals/ID), so they outlast the server; one runs at a time per profile. Mounted by
api/app.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, status
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, Field, StringConstraints

from backends import BackendUnavailable

from ..evals import AttemptResult, ResultsFile, RunError, RunRecord, Summary, open_run
from ..evals.run import RECORD, SUMMARY
from .bounds import AUTHENTICATED, Offset, errors, stream_errors
from .profiles import Auth, Profile
from .run_progress import Progress, admit, directory_of, runs, stream

router = APIRouter(prefix="/evals", tags=["evals"], responses=AUTHENTICATED)
RunId = Annotated[str, StringConstraints(pattern=r"^[a-f0-9]{12}$")]
SuiteName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")]
Glob = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00]*$")]
RUN_ERRORS = errors(401, 404)
RUN_ERRORS[404] = {**RUN_ERRORS[404], "description": "No such evaluation run in the token's profile"}


class NewEval(BaseModel):
    suite: SuiteName
    """`builtin`, or NAME for a suite the operator put in the profile's home at evals/suites/NAME (no
    server path, no URL: a token cannot make the server read its files or fetch from anywhere)."""
    agent: Literal["hermetic", "oracle", "nop"] = "oracle"
    attempts: int = Field(1, ge=1, le=20)
    workers: int = Field(2, ge=1, le=64)
    """Attempts at once: at most the profile's limits.max_sandboxes."""
    include: list[Glob] = Field([], max_length=50)
    exclude: list[Glob] = Field([], max_length=50)
    tags: list[Glob] = Field([], max_length=50)
    learning: Literal["off", "on", "frozen"] = "off"
    model: Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00]*$")] | None = (
        None
    )


class EvalStatus(BaseModel):
    id: str
    state: Literal["running", "finished", "interrupted"]
    """interrupted: the server stopped during the run (`hermetic eval run --resume DIR` continues it)."""
    record: RunRecord
    done: int
    total: int
    summary: Summary | None = None


def _runs(request: Request) -> dict[tuple[str, str], Progress[AttemptResult]]:
    return runs(request, "evals")


def _home(profile: Profile) -> Path:
    return profile.settings.home / "evals"


def _directory(profile: Profile, run_id: str) -> Path:
    return directory_of(_home(profile), run_id, RECORD, "evaluation run")


def run_directory(profile: Auth, run_id: RunId) -> Path:
    """The run's directory; 404 before any answer starts (an event stream cannot turn into a 404)."""
    return _directory(profile, run_id)


RunDir = Annotated[Path, Depends(run_directory)]


@router.post("", status_code=status.HTTP_202_ACCEPTED, responses=errors(400, 401, 429))
async def start(profile: Auth, body: NewEval, request: Request) -> EvalStatus:
    """Start a run in the background; follow it at /evals/ID/events."""
    name = profile.settings.profile
    admit(request, "evals", name, "an evaluation")
    suite = body.suite if body.suite == "builtin" else str(_home(profile) / "suites" / body.suite)
    if suite != "builtin" and not Path(suite).is_dir():
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, f"no suite {body.suite} (evals/suites/ in the profile's home)"
        )
    limit = profile.settings.limits.max_sandboxes
    if body.workers > limit:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"workers: at most {limit} (limits.max_sandboxes)")
    record = RunRecord(
        suite=suite,
        agent=body.agent,
        attempts=body.attempts,
        backend="docker",
        include=body.include,
        exclude=body.exclude,
        tags=body.tags,
        model=body.model,
        learning=body.learning,
        profile=name,
    )
    run_id = uuid.uuid4().hex[:12]
    try:
        evaluation = await asyncio.to_thread(
            open_run,
            record,
            _home(profile) / run_id,
            resume=False,
            workers=body.workers,
            settings=profile.settings,
        )
    except (RunError, BackendUnavailable) as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    runner = evaluation.runner
    progress = Progress(runner.results.read(), len(evaluation.suite.tasks) * record.attempts)
    _runs(request)[(name, run_id)] = progress

    def finish() -> None:  # the summary is written whatever happened
        evaluation.summary()
        evaluation.close()

    progress.drive(f"eval-{run_id}", lambda: runner.run(evaluation.suite.tasks, progress.arrived), finish)
    return EvalStatus(id=run_id, state="running", record=record, done=0, total=progress.total)


@router.get("", responses=errors(401))
def list_runs(profile: Auth, request: Request) -> list[EvalStatus]:
    """The profile's runs, newest first."""
    home = _home(profile)
    found = (
        sorted(home.glob(f"*/{RECORD}"), key=lambda p: p.stat().st_mtime, reverse=True)
        if home.is_dir()
        else []
    )
    return [_status(profile, request, path.parent.name) for path in found]


@router.get("/{run_id}", responses=RUN_ERRORS)
def get_run(profile: Auth, run_id: RunId, request: Request) -> EvalStatus:
    return _status(profile, request, run_id)


@router.get("/{run_id}/results", responses=RUN_ERRORS)
def results(
    directory: RunDir, after: Annotated[Offset, Query(description="Skip this many")] = 0
) -> list[AttemptResult]:
    """Every finished attempt (results.jsonl), in the order they ended."""
    return ResultsFile(directory / "results.jsonl").read()[after:]


STREAM_ERRORS = stream_errors(RUN_ERRORS)


@router.get("/{run_id}/events", response_class=EventSourceResponse, responses=STREAM_ERRORS)
async def events(
    profile: Auth,
    run_id: RunId,
    directory: RunDir,
    request: Request,
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
) -> AsyncIterator[ServerSentEvent]:
    """One `attempt` event per finished attempt (its result; `id` its number), then `end` with the
    summary. A finished run replays its attempts; a reconnecting client resumes after Last-Event-ID."""
    progress = _runs(request).get((profile.settings.profile, run_id))
    stored = ResultsFile(directory / "results.jsonl").read
    async for message in stream(progress, stored, lambda: _summary(directory), "attempt", last_event_id):
        yield message


def _summary(directory: Path) -> dict[str, object] | None:
    path = directory / SUMMARY
    return Summary.model_validate_json(path.read_text()).model_dump() if path.is_file() else None


def _status(profile: Profile, request: Request, run_id: str) -> EvalStatus:
    directory = _directory(profile, run_id)
    record = RunRecord.model_validate_json((directory / RECORD).read_text())
    progress = _runs(request).get((profile.settings.profile, run_id))
    done = len(ResultsFile(directory / "results.jsonl").read())
    summary = (
        Summary.model_validate_json((directory / SUMMARY).read_text())
        if (directory / SUMMARY).is_file()
        else None
    )
    if progress is not None and progress.running:
        return EvalStatus(id=run_id, state="running", record=record, done=done, total=progress.total)
    total = progress.total if progress is not None else done  # what was planned is known to the driver only
    state: Literal["finished", "interrupted"] = "finished" if summary is not None else "interrupted"
    return EvalStatus(id=run_id, state=state, record=record, done=done, total=total, summary=summary)
