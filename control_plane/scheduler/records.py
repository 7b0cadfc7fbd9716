"""The scheduler's rows in the profile's database: jobs (with their lease) and the history of their runs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel
from pydantic import Field as PydanticField
from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

CatchUp = Literal["once", "all", "none"]
RunStatus = Literal["running", "ok", "silent", "failed", "skipped", "abandoned"]
SILENT = "[SILENT]"
"""A reply of exactly this delivers nothing ("tell me only if something is wrong")."""


class JobRecord(SQLModel, table=True):
    """One scheduled job of a profile. `next_run_at` is the next occurrence nobody has claimed yet; the
    lease (owner, until) says which process is running the job now."""

    __tablename__ = "cron_jobs"
    __table_args__ = (Index("cron_jobs_due", "profile", "next_run_at"),)

    id: str = Field(primary_key=True)
    profile: str
    name: str
    prompt: str
    schedule: str
    """What the user wrote: '0 9 * * 1', 'every 2h', 'in 30m', '2026-12-24T09:00'."""
    kind: str
    """cron, every or once (schedules.Schedule)."""
    expr: str
    tz: str
    anchor: float
    model: str | None = None
    toolsets: list[str] | None = Field(default=None, sa_column=Column(JSON(none_as_null=True)))
    skills: list[str] = Field(default_factory=list, sa_column=Column(JSON))
    """Skills whose instructions are given to the run before the prompt."""
    workspace: str | None = None
    """A directory of the profile home copied into the run's sandbox workspace before it starts."""
    deliver: list[str] = Field(default_factory=list, sa_column=Column(JSON))
    """Where the result goes: 'file:PATH', 'webhook:URL', 'telegram:CHAT', ...; empty: nowhere."""
    catch_up: str = "once"
    max_retries: int = 2
    retry_backoff: float = 30.0
    paused: bool = False
    created_by: str = "cli"
    created_at: float
    next_run_at: float | None = None
    """None: a one-off that has run (or a job that will never fire again)."""
    last_run_at: float | None = None
    last_status: str | None = None
    lease_owner: str | None = None
    lease_until: float | None = None
    retry_at: float | None = None
    """When the failed occurrence `retry_for` is tried again (kept here, so a restart does not lose it)."""
    retry_for: float | None = None
    retry_attempt: int = 0


class RunRecord(SQLModel, table=True):
    """One attempt at one occurrence of a job."""

    __tablename__ = "cron_runs"
    __table_args__ = (
        UniqueConstraint("job_id", "scheduled_for", "attempt", name="cron_runs_occurrence"),
        Index("cron_runs_job", "job_id", "id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(foreign_key="cron_jobs.id", ondelete="CASCADE")
    scheduled_for: float
    """The occurrence this run is for (its due time); 'run now' uses the time it was asked."""
    attempt: int = 0
    owner: str
    """The process that ran it (host:pid:random)."""
    status: str = "running"
    started_at: float
    finished_at: float | None = None
    duration_ms: float | None = None
    session_id: str | None = None
    result: str | None = None
    error: str | None = None
    deliveries: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON))
    """One entry per target: {target, ok, detail}."""


class JobSpec(BaseModel):
    """What a caller (CLI, API, the schedule tool) gives to create a job; checked before anything is saved."""

    schedule: str = PydanticField(min_length=1, max_length=200)
    prompt: str = PydanticField(min_length=1, max_length=100_000)
    name: str | None = PydanticField(None, max_length=200)
    deliver: list[str] = PydanticField(default_factory=list, max_length=10)
    model: str | None = PydanticField(None, max_length=200)
    toolsets: list[str] | None = None
    skills: list[str] = PydanticField(default_factory=list, max_length=20)
    workspace: str | None = PydanticField(None, max_length=500)
    catch_up: CatchUp = "once"
    max_retries: int = PydanticField(2, ge=0, le=20)
    retry_backoff: float = PydanticField(30.0, ge=0, le=86400)
    """Seconds before the first retry; doubled for each further one."""
