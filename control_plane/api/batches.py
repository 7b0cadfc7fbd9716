"""Batch runs over HTTP (the same runs as `hermetic batch run`, for the caller's profile): start one from a
prompts file's text or a list of prompts, follow its results as server-sent events, read its prompts,
status and summary. Runs live in the profile's home (batches/ID), so they outlast the server; one runs at
a time per profile. Mounted by api/app.py."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Request, status
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, Field, StringConstraints, model_validator

from ..agent.agent import Agent
from ..batch import BatchError, BatchItem, BatchResult, BatchRunner, Summary, batch_settings, parse_prompts
from ..batch.runner import write_summary
from .bounds import AUTHENTICATED, NO_NUL, errors, stream_errors
from .profiles import Auth, Profile
from .run_progress import Progress, admit, directory_of, runs, stream

router = APIRouter(prefix="/batches", tags=["batches"], responses=AUTHENTICATED)
RunId = Annotated[str, StringConstraints(pattern=r"^[a-f0-9]{12}$")]
PromptsText = Annotated[str, StringConstraints(min_length=1, max_length=10_000_000, pattern=NO_NUL)]
MAX_PROMPTS = 10_000
RECORD, PROMPTS, RESULTS, SUMMARY = "batch.json", "prompts.jsonl", "results.jsonl", "summary.json"
RUN_ERRORS = errors(401, 404)
RUN_ERRORS[404] = {**RUN_ERRORS[404], "description": "No such batch run in the token's profile"}
STREAM_ERRORS = stream_errors(RUN_ERRORS)


class NewBatch(BaseModel):
    """Exactly one of `prompts_file` and `prompts`."""

    prompts_file: PromptsText | None = None
    """A prompts file's text, as `hermetic batch run` reads it: JSON lines, each `{"prompt": ...}` with an
    optional id, category and toolsets, or a JSON string."""
    prompts: list[BatchItem] | None = Field(None, min_length=1, max_length=MAX_PROMPTS)
    workers: int = Field(2, ge=1, le=64)
    """Prompts at once: at most the profile's limits.max_sandboxes."""
    timeout: float = Field(600.0, ge=1, le=86_400)
    """Seconds one prompt may take."""
    max_iterations: int | None = Field(None, ge=1, le=10_000)
    """Most model calls per prompt (default: the profile's limits.max_iterations)."""

    @model_validator(mode="after")
    def one_source(self) -> NewBatch:
        if (self.prompts_file is None) == (self.prompts is None):
            raise ValueError("give exactly one of prompts_file and prompts")
        return self

    def items(self) -> list[BatchItem]:
        """The prompts, checked as a prompts file's lines are (ids, toolsets). Raises BatchError."""
        if self.prompts is not None:
            text = "\n".join(json.dumps(item.model_dump(exclude_defaults=True)) for item in self.prompts)
            items = parse_prompts(text, "prompts")
        else:
            items = parse_prompts(self.prompts_file or "", "prompts_file")
        if len(items) > MAX_PROMPTS:
            raise BatchError(f"at most {MAX_PROMPTS} prompts in one batch")
        return items


class BatchRecord(BaseModel):
    """What was asked (batch.json)."""

    prompts: int
    workers: int
    timeout: float
    max_iterations: int | None
    created: float
    """Unix time."""


class BatchStatus(BaseModel):
    id: str
    state: Literal["running", "finished", "interrupted"]
    """interrupted: the server stopped during the run (`hermetic batch run --resume` with the run's
    prompts.jsonl and directory continues it)."""
    record: BatchRecord
    done: int
    total: int
    statuses: dict[str, int]
    """Finished prompts by status: completed, failed, timeout, budget."""
    summary: Summary | None = None


def _runs(request: Request) -> dict[tuple[str, str], Progress[BatchResult]]:
    return runs(request, "batches")


def _home(profile: Profile) -> Path:
    return profile.settings.home / "batches"


def run_directory(profile: Auth, run_id: RunId) -> Path:
    """The run's directory; 404 before any answer starts (an event stream cannot turn into a 404)."""
    return directory_of(_home(profile), run_id, RECORD, "batch run")


RunDir = Annotated[Path, Depends(run_directory)]


@router.post("", status_code=status.HTTP_202_ACCEPTED, responses=errors(400, 401, 429))
async def start(profile: Auth, body: NewBatch, request: Request) -> BatchStatus:
    """Start a run in the background, each prompt its own session (source `batch`) and sandbox; follow it
    at /batches/ID/events."""
    name = profile.settings.profile
    admit(request, "batches", name, "a batch")
    try:
        items = body.items()
    except BatchError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    limit = profile.settings.limits.max_sandboxes
    if body.workers > limit:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"workers: at most {limit} (limits.max_sandboxes)")
    run_id = uuid.uuid4().hex[:12]
    directory = _home(profile) / run_id
    record = BatchRecord(
        prompts=len(items),
        workers=body.workers,
        timeout=body.timeout,
        max_iterations=body.max_iterations,
        created=time.time(),
    )
    agent = await asyncio.to_thread(_open, profile, directory, items, record)
    runner = BatchRunner(agent, directory / RESULTS, workers=body.workers, timeout=body.timeout)
    progress: Progress[BatchResult] = Progress([], len(items))
    _runs(request)[(name, run_id)] = progress
    summary: list[Summary] = []

    def finish() -> None:
        agent.close()
        if summary:
            write_summary(directory / SUMMARY, summary[0])

    def work() -> None:
        summary.append(asyncio.run(runner.run(items, on_result=progress.arrived)))

    progress.drive(f"batch-{run_id}", work, finish)
    return BatchStatus(id=run_id, state="running", record=record, done=0, total=len(items), statuses={})


def _open(profile: Profile, directory: Path, items: list[BatchItem], record: BatchRecord) -> Agent:
    """The run's agent, and its directory as `hermetic batch run --resume` reads it."""
    # The profile's database, model router and sandboxes: a batch's sandboxes count against its limits.
    shared = profile.agent
    settings = batch_settings(profile.settings, record.max_iterations)
    agent = Agent(settings, store=shared.store, router=shared.router, sandboxes=shared.sandboxes)
    directory.mkdir(parents=True)
    (directory / PROMPTS).write_text("".join(item.model_dump_json() + "\n" for item in items))
    (directory / RESULTS).touch()
    (directory / RECORD).write_text(record.model_dump_json(indent=2) + "\n")  # last: the run now exists
    return agent


@router.get("", responses=errors(401))
def list_runs(profile: Auth, request: Request) -> list[BatchStatus]:
    """The profile's runs, newest first."""
    home = _home(profile)
    found = home.glob(f"*/{RECORD}") if home.is_dir() else []
    statuses = [_status(profile, request, path.parent) for path in found]
    return sorted(statuses, key=lambda s: s.record.created, reverse=True)


@router.get("/{run_id}", responses=RUN_ERRORS)
def get_run(profile: Auth, directory: RunDir, request: Request) -> BatchStatus:
    return _status(profile, request, directory)


@router.get("/{run_id}/prompts", responses=RUN_ERRORS)
def prompts(directory: RunDir) -> list[BatchItem]:
    """The run's prompts in order, each with its id (given, or line-N)."""
    return parse_prompts((directory / PROMPTS).read_text(encoding="utf-8"), PROMPTS)


@router.get("/{run_id}/events", response_class=EventSourceResponse, responses=STREAM_ERRORS)
async def events(
    profile: Auth,
    run_id: RunId,
    directory: RunDir,
    request: Request,
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
) -> AsyncIterator[ServerSentEvent]:
    """One `result` event per finished prompt (its result, as a line of results.jsonl; `id` its number),
    then `end` with the summary. A finished run replays its results; a reconnecting client resumes after
    Last-Event-ID."""
    progress = _runs(request).get((profile.settings.profile, run_id))
    async for message in stream(
        progress, lambda: _results(directory), lambda: _summary_data(directory), "result", last_event_id
    ):
        yield message


def _results(directory: Path) -> list[BatchResult]:
    """results.jsonl; a line torn by a crash is left out."""
    found: list[BatchResult] = []
    for line in (directory / RESULTS).read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            found.append(BatchResult.model_validate_json(line))
        except ValueError:
            continue
    return found


def _summary(directory: Path) -> Summary | None:
    path = directory / SUMMARY
    return Summary.model_validate_json(path.read_text()) if path.is_file() else None


def _summary_data(directory: Path) -> dict[str, object] | None:
    summary = _summary(directory)
    return summary.model_dump() if summary is not None else None


def _status(profile: Profile, request: Request, directory: Path) -> BatchStatus:
    run_id = directory.name
    record = BatchRecord.model_validate_json((directory / RECORD).read_text())
    progress = _runs(request).get((profile.settings.profile, run_id))
    results = progress.results if progress is not None else _results(directory)
    statuses = dict(Counter(r.status for r in results))
    running = progress is not None and progress.running
    summary = None if running else _summary(directory)
    state: Literal["running", "finished", "interrupted"] = (
        "running" if running else "finished" if summary is not None else "interrupted"
    )
    return BatchStatus(
        id=run_id,
        state=state,
        record=record,
        done=len(results),
        total=record.prompts,
        statuses=statuses,
        summary=summary,
    )
