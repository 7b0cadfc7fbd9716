"""Jobs and their run history in the profile's database, and the lease that makes each occurrence run once.

Claiming is one conditional UPDATE: it moves `next_run_at` past the occurrence and takes the lease only
if `next_run_at` still holds that occurrence and no live lease exists. Of any number of processes on the
same database, exactly one sees its UPDATE change a row; the others see none and move on. A unique
(job, occurrence, attempt) on the runs table is the second wall. A process that dies mid-run stops
renewing its lease; once the lease has expired, the next process to look marks that run abandoned, the
job is free again, and the abandoned occurrence is retried within the job's retry policy.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, cast

from sqlalchemy import Connection, Engine, and_, delete, insert, or_, text, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, SQLModel, col, select

from ..store import Store, StoreError
from ..store.engine import SCHEMA_LOCK, write_transaction
from .delivery import check_target
from .records import JobRecord, JobSpec, RunRecord
from .schedules import Schedule, parse

GRACE_SECONDS = 60.0
"""An occurrence later than this counts as missed (catch_up 'none' skips it)."""
REPLAY_LIMIT = 100
"""catch_up 'all' runs at most this many missed occurrences (the latest ones), not three days of a job
every minute."""
_TABLES = [JobRecord.__table__, RunRecord.__table__]  # type: ignore[attr-defined]


class JobError(StoreError):
    """A job that cannot be created or changed as asked; the message says why."""


def process_id() -> str:
    """Who holds a lease: host, pid and a random part (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def schedule_of(job: JobRecord) -> Schedule:
    return Schedule(job.kind, job.expr, job.tz, job.anchor)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Claim:
    """An occurrence this process now owns: run it (or, when `skip`, record that it was missed)."""

    job: JobRecord
    scheduled_for: float
    skip: bool = False
    attempt: int = 0
    """0 for the occurrence itself, then 1, 2, ... for its retries."""


class JobStore:
    """Thread-safe, like the Store whose engine it shares."""

    def __init__(self, store: Store) -> None:
        self.engine: Engine = store.engine
        with self._write() as conn:
            if self.engine.dialect.name == "postgresql":
                conn.execute(text(SCHEMA_LOCK))  # servers starting at once on a new database
            SQLModel.metadata.create_all(conn, tables=_TABLES, checkfirst=True)

    # -- jobs ------------------------------------------------------------------------------

    def add(
        self,
        profile: str,
        spec: JobSpec,
        *,
        tz: str,
        created_by: str = "cli",
        now: float | None = None,
        known_toolsets: set[str] | None = None,
    ) -> JobRecord:
        """Check and save a new job. Raises JobError (ScheduleError and DeliveryError are ValueErrors)."""
        now = time.time() if now is None else now
        try:
            schedule = parse(spec.schedule, tz, now)
            for target in spec.deliver:
                check_target(target)
        except ValueError as exc:
            raise JobError(str(exc)) from None
        if spec.toolsets is not None and known_toolsets is not None:
            unknown = set(spec.toolsets) - known_toolsets
            if unknown:
                raise JobError(f"unknown toolset(s) {', '.join(sorted(unknown))}")
        if spec.workspace is not None and (
            PurePosixPath(spec.workspace).is_absolute() or ".." in PurePosixPath(spec.workspace).parts
        ):
            raise JobError("workspace: a directory inside the profile home, without '..'")
        job = JobRecord(
            id="j-" + secrets.token_hex(4),
            profile=profile,
            name=spec.name or " ".join(spec.prompt.split())[:60],
            prompt=spec.prompt,
            schedule=spec.schedule,
            kind=schedule.kind,
            expr=schedule.expr,
            tz=tz,
            anchor=schedule.anchor,
            model=spec.model,
            toolsets=spec.toolsets,
            skills=spec.skills,
            workspace=spec.workspace,
            deliver=spec.deliver,
            catch_up=spec.catch_up,
            max_retries=spec.max_retries,
            retry_backoff=spec.retry_backoff,
            created_by=created_by,
            created_at=now,
            next_run_at=schedule.next_after(now),
        )
        with self._write() as conn:
            conn.execute(insert(JobRecord).values(job.model_dump()))
        return job

    def get(self, profile: str, job_id: str) -> JobRecord | None:
        query = select(JobRecord).where(JobRecord.id == job_id, JobRecord.profile == profile)
        with self._read() as db:
            return db.exec(query).first()

    def all(self, profile: str) -> list[JobRecord]:
        query = select(JobRecord).where(JobRecord.profile == profile).order_by(col(JobRecord.created_at))
        with self._read() as db:
            return list(db.exec(query))

    def set_paused(self, profile: str, job_id: str, paused: bool, now: float | None = None) -> JobRecord:
        """Pause or resume. Resuming a recurring job starts from its next occurrence after now: what fell
        due while it was paused does not run."""
        job = self._must(profile, job_id)
        values: dict[str, Any] = {"paused": paused}
        if not paused and job.kind != "once":
            values["next_run_at"] = schedule_of(job).next_after(time.time() if now is None else now)
        with self._write() as conn:
            conn.execute(update(JobRecord).where(col(JobRecord.id) == job_id).values(values))
        return self._must(profile, job_id)

    def remove(self, profile: str, job_id: str) -> bool:
        with self._write() as conn:
            conn.execute(delete(RunRecord).where(col(RunRecord.job_id) == job_id))
            done = conn.execute(
                delete(JobRecord).where(col(JobRecord.id) == job_id, col(JobRecord.profile) == profile)
            )
            return done.rowcount > 0

    def _must(self, profile: str, job_id: str) -> JobRecord:
        job = self.get(profile, job_id)
        if job is None:
            raise JobError(f"no job {job_id!r} in profile {profile!r}")
        return job

    # -- what is due, and claiming it ------------------------------------------------------

    def due(self, profile: str, now: float) -> list[JobRecord]:
        """Jobs with an unclaimed occurrence at or before now and no live lease."""
        query = select(JobRecord).where(
            JobRecord.profile == profile,
            col(JobRecord.paused).is_(False),
            or_(col(JobRecord.next_run_at) <= now, col(JobRecord.retry_at) <= now),
            _lease_free(now),
        )
        with self._read() as db:
            return list(db.exec(query.order_by(col(JobRecord.next_run_at))))

    def next_wake(self, profile: str) -> float | None:
        """The earliest time anything may change: a due occurrence or a lease running out."""
        with self._read() as db:
            jobs = list(db.exec(select(JobRecord).where(JobRecord.profile == profile)))
        # A leased job's next occurrence waits for the lease: its end (or expiry) is the time to look.
        times = [
            j.lease_until if j.lease_until is not None else min(_known(j.next_run_at, j.retry_at))
            for j in jobs
            if j.lease_until is not None or (not j.paused and _known(j.next_run_at, j.retry_at))
        ]
        return min(times) if times else None

    def claim(self, job: JobRecord, now: float, owner: str, lease: float) -> Claim | None:
        """Take the job's due retry, else its occurrence `job.next_run_at`, for `owner`; None when another
        process has it."""
        if job.retry_at is not None and job.retry_at <= now and job.retry_for is not None:
            with self._write() as conn:
                done = conn.execute(
                    update(JobRecord)
                    .where(
                        col(JobRecord.id) == job.id, col(JobRecord.retry_at) == job.retry_at, _lease_free(now)
                    )
                    .values(retry_at=None, lease_owner=owner, lease_until=now + lease)
                )
            return Claim(job, job.retry_for, attempt=job.retry_attempt) if done.rowcount == 1 else None
        due = job.next_run_at
        if due is None:
            return None
        schedule = schedule_of(job)
        missed = due < now - GRACE_SECONDS
        occurrence = due
        if missed and job.catch_up == "all":  # replay the missed ones, but only the latest REPLAY_LIMIT
            floor = schedule.nth_latest(REPLAY_LIMIT, now)
            occurrence = max(due, floor) if floor is not None else due
        following = schedule.next_after(occurrence if job.catch_up == "all" else now)
        skip = missed and job.catch_up == "none"
        values: dict[str, Any] = {"next_run_at": following}
        if not skip:
            values.update(lease_owner=owner, lease_until=now + lease)
        with self._write() as conn:
            done = conn.execute(
                update(JobRecord)
                .where(
                    col(JobRecord.id) == job.id,
                    col(JobRecord.next_run_at) == due,
                    col(JobRecord.paused).is_(False),
                    _lease_free(now),
                )
                .values(values)
            )
            if done.rowcount != 1:
                return None
        return Claim(job, occurrence, skip)

    def claim_now(self, job: JobRecord, now: float, owner: str, lease: float) -> Claim | None:
        """Take the lease to run the job now ('cron run'), leaving its schedule as it is."""
        with self._write() as conn:
            done = conn.execute(
                update(JobRecord)
                .where(col(JobRecord.id) == job.id, _lease_free(now))
                .values(lease_owner=owner, lease_until=now + lease)
            )
        return Claim(job, now) if done.rowcount == 1 else None

    def renew(self, job_id: str, owner: str, until: float) -> bool:
        with self._write() as conn:
            done = conn.execute(
                update(JobRecord)
                .where(col(JobRecord.id) == job_id, col(JobRecord.lease_owner) == owner)
                .values(lease_until=until)
            )
            return done.rowcount == 1

    def release(
        self,
        job_id: str,
        owner: str,
        status: str,
        finished: float,
        retry: tuple[float, float, int] | None = None,
    ) -> None:
        """Free the job; `retry` = (when, occurrence, attempt) keeps a failed occurrence's next try."""
        when, occurrence, attempt = retry or (None, None, 0)
        with self._write() as conn:
            conn.execute(
                update(JobRecord)
                .where(col(JobRecord.id) == job_id, col(JobRecord.lease_owner) == owner)
                .values(
                    lease_owner=None,
                    lease_until=None,
                    last_run_at=finished,
                    last_status=status,
                    retry_at=when,
                    retry_for=occurrence,
                    retry_attempt=attempt,
                )
            )

    def reap(self, profile: str, now: float) -> int:
        """Runs whose process stopped renewing the lease (it was killed) are abandoned and their jobs free
        again; an abandoned attempt with retries left is tried again, as a failed one is (attempt + 1,
        after the job's backoff). Such a run had not finished, so had delivered nothing: the retry, a
        new (job, occurrence, attempt) row, cannot deliver twice."""
        with self._write() as conn:
            stale = select(JobRecord).where(
                JobRecord.profile == profile,
                col(JobRecord.lease_until).is_not(None),
                col(JobRecord.lease_until) < now,
            )
            jobs = [JobRecord.model_validate(row._mapping) for row in conn.execute(stale)]
            for job in jobs:
                running = select(RunRecord).where(RunRecord.job_id == job.id, RunRecord.status == "running")
                killed = [RunRecord.model_validate(row._mapping) for row in conn.execute(running)]
                conn.execute(
                    update(RunRecord)
                    .where(col(RunRecord.id).in_([run.id for run in killed]))
                    .values(status="abandoned", finished_at=now, error="the process running it stopped")
                )
                values: dict[str, Any] = {
                    "lease_owner": None,
                    "lease_until": None,
                    "last_status": "abandoned",
                }
                last = max(killed, key=lambda run: run.attempt, default=None)
                if last is not None and last.attempt < job.max_retries:
                    values.update(
                        retry_at=now + job.retry_backoff * 2**last.attempt,
                        retry_for=last.scheduled_for,
                        retry_attempt=last.attempt + 1,
                    )
                conn.execute(
                    update(JobRecord)
                    .where(col(JobRecord.id) == job.id, col(JobRecord.lease_until) < now)
                    .values(values)
                )
            return len(jobs)

    # -- runs ------------------------------------------------------------------------------

    def start_run(self, job_id: str, scheduled_for: float, attempt: int, owner: str, **fields: Any) -> int:
        """A new history row; JobError when this attempt at this occurrence already exists."""
        row = {
            "job_id": job_id,
            "scheduled_for": scheduled_for,
            "attempt": attempt,
            "owner": owner,
            "started_at": time.time(),
            "deliveries": [],
            **fields,
        }
        try:
            with self._write() as conn:
                done = conn.execute(insert(RunRecord).returning(col(RunRecord.id)), row)
                return cast(int, done.scalar_one())
        except IntegrityError:
            if not self._job_exists(job_id):
                raise JobError(f"job {job_id} was removed") from None
            raise JobError(
                f"job {job_id}: occurrence {scheduled_for} attempt {attempt} already ran"
            ) from None

    def _job_exists(self, job_id: str) -> bool:
        with self._read() as db:
            return db.exec(select(JobRecord.id).where(JobRecord.id == job_id)).first() is not None

    def finish_run(self, run_id: int, **fields: Any) -> None:
        with self._write() as conn:
            conn.execute(update(RunRecord).where(col(RunRecord.id) == run_id).values(fields))

    def history(self, profile: str, job_id: str, limit: int = 50) -> list[RunRecord]:
        """The job's runs, latest first."""
        self._must(profile, job_id)
        query = (
            select(RunRecord)
            .where(RunRecord.job_id == job_id)
            .order_by(col(RunRecord.id).desc())
            .limit(max(limit, 0))
        )
        with self._read() as db:
            return list(db.exec(query))

    # -- transactions ----------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with write_transaction(self.engine) as conn:
            yield conn

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as db:
            yield db


def _known(*times: float | None) -> list[float]:
    return [t for t in times if t is not None]


def _lease_free(now: float) -> Any:
    return or_(col(JobRecord.lease_until).is_(None), and_(col(JobRecord.lease_until) < now))
