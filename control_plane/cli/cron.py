"""`hermetic cron ...`: the profile's scheduled jobs from the terminal (they run inside `hermetic serve`)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Annotated
from zoneinfo import ZoneInfo

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..config.settings import Settings, load_settings
from ..scheduler import JobError, JobRecord, JobSpec, JobStore, Scheduler
from ..scheduler.jobs import schedule_of
from ..store import Store
from ..tools import TOOLS
from .listing_json import AsJson, print_json

app = typer.Typer(
    help="Scheduled jobs: add, list, show, pause, resume, run, rm, history.", no_args_is_help=True
)
console = Console(highlight=False)
err = Console(stderr=True, highlight=False)
JobId = Annotated[str, typer.Argument(help="The job's id (hermetic cron list)")]


@contextlib.contextmanager
def jobs() -> Iterator[tuple[Settings, JobStore]]:
    """The profile's jobs; a refused request prints its reason and exits 1."""
    settings = load_settings()
    store = Store(str(settings.database_url))
    try:
        yield settings, JobStore(store)
    except JobError as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(1) from exc
    finally:
        store.close()


def _when(timestamp: float | None, tz: str) -> str:
    if timestamp is None:
        return ""
    return dt.datetime.fromtimestamp(timestamp, ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M:%S %Z")


def _must(store: JobStore, settings: Settings, job_id: str) -> JobRecord:
    job = store.get(settings.profile, job_id)
    if job is None:
        raise JobError(f"no job {job_id} in profile {settings.profile} (hermetic cron list)")
    return job


@app.command("add")
def add(
    schedule: Annotated[str, typer.Argument(help="'0 9 * * 1', 'every 2h', 'in 30m' or an ISO time")],
    prompt: Annotated[str, typer.Argument(help="What the agent should do at each run")],
    deliver: Annotated[
        list[str] | None,
        typer.Option("--deliver", "-d", help="file:NAME, webhook:URL, telegram:CHAT (repeat)"),
    ] = None,
    name: Annotated[str | None, typer.Option(help="A short name")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="litellm model id for this job")] = None,
    toolsets: Annotated[str | None, typer.Option(help="Comma-separated toolsets for this job")] = None,
    skill: Annotated[list[str] | None, typer.Option("--skill", help="Skill to preload (repeat)")] = None,
    workspace: Annotated[
        str | None, typer.Option(help="Directory in the profile home copied into each run's sandbox")
    ] = None,
    catch_up: Annotated[
        str, typer.Option(help="After downtime run missed occurrences: once, all, none")
    ] = "once",
    retries: Annotated[int, typer.Option(help="Retries of a failed run")] = 2,
    backoff: Annotated[float, typer.Option(help="Seconds before the first retry (doubles)")] = 30.0,
) -> None:
    """Schedule a job; prints its id."""
    try:
        spec = JobSpec(
            schedule=schedule,
            prompt=prompt,
            name=name,
            deliver=deliver or [],
            model=model,
            toolsets=[t.strip() for t in toolsets.split(",") if t.strip()] if toolsets else None,
            skills=skill or [],
            workspace=workspace,
            catch_up=catch_up,  # type: ignore[arg-type]
            max_retries=retries,
            retry_backoff=backoff,
        )
    except ValidationError as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(2) from None
    with jobs() as (settings, store):
        job = store.add(settings.profile, spec, tz=settings.scheduler.timezone, known_toolsets=TOOLS.toolsets)
        print(job.id)
        err.print(f"[dim]{schedule_of(job).describe()}; next run {_when(job.next_run_at, job.tz)}[/]")


@app.command("list")
def list_(as_json: AsJson = False) -> None:
    """The profile's jobs."""
    with jobs() as (settings, store):
        listed = store.all(settings.profile)
        if as_json:
            print_json({**job.model_dump(mode="json"), "state": _state(job)} for job in listed)
            return
        table = Table("id", "state", "schedule", "next run", "last", "name", box=None)
        for job in listed:
            table.add_row(
                job.id,
                _state(job),
                escape(job.schedule),
                _when(job.next_run_at, job.tz),
                job.last_status or "",
                escape(job.name),
            )
        console.print(table)


def _state(job: JobRecord) -> str:
    return "paused" if job.paused else ("running" if job.lease_owner else "active")


@app.command("show")
def show(job_id: JobId) -> None:
    """A job's settings (its runs: hermetic cron history)."""
    with jobs() as (settings, store):
        job = _must(store, settings, job_id)
        for field, value in job.model_dump().items():
            console.print(f"[bold]{field}[/]: {escape(str(value))}")
        console.print(f"[bold]schedule[/] {escape(schedule_of(job).describe())}")


@app.command("pause")
def pause(job_id: JobId) -> None:
    """Stop running the job until it is resumed."""
    with jobs() as (settings, store):
        store.set_paused(settings.profile, job_id, True)


@app.command("resume")
def resume(job_id: JobId) -> None:
    """Resume from the next occurrence (what fell due while paused does not run)."""
    with jobs() as (settings, store):
        job = store.set_paused(settings.profile, job_id, False)
        err.print(f"[dim]next run {_when(job.next_run_at, job.tz)}[/]")


@app.command("rm")
def rm(job_id: JobId) -> None:
    """Delete the job and its history."""
    with jobs() as (settings, store):
        if not store.remove(settings.profile, job_id):
            raise JobError(f"no job {job_id} in profile {settings.profile}")


@app.command("run")
def run(job_id: JobId) -> None:
    """Run the job once now, here, as it would run on schedule (recorded and delivered)."""
    settings = load_settings()
    scheduler = Scheduler(settings)

    async def once() -> None:
        try:
            attempt = await scheduler.run_now(job_id)
        finally:
            await scheduler.stop()
        if attempt is None:
            return
        console.print(
            escape(attempt.text) if attempt.status != "failed" else f"[red]{escape(attempt.error or '')}[/]"
        )
        err.print(f"[dim]{attempt.status}; session {attempt.session_id}[/]")
        if attempt.status == "failed":
            raise typer.Exit(1)

    try:
        asyncio.run(once())
    except JobError as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(1) from None
    finally:
        scheduler.store.close()


@app.command("history")
def history(job_id: JobId, limit: Annotated[int, typer.Option(help="How many runs")] = 20) -> None:
    """The job's runs, latest first: when, how long, how it ended, its session and deliveries."""
    with jobs() as (settings, store):
        job = _must(store, settings, job_id)
        table = Table(
            "run", "scheduled for", "try", "status", "seconds", "session", "delivered", "result", box=None
        )
        for run_ in store.history(settings.profile, job_id, limit):
            delivered = ", ".join(
                ("✓ " if d.get("ok") else "✗ ") + str(d.get("target")) for d in run_.deliveries
            )
            table.add_row(
                str(run_.id),
                _when(run_.scheduled_for, job.tz),
                str(run_.attempt + 1),
                run_.status,
                f"{run_.duration_ms / 1000:.1f}" if run_.duration_ms is not None else "",
                run_.session_id or "",
                escape(delivered),
                escape(" ".join((run_.error or run_.result or "").split())[:80]),
            )
        console.print(table)
