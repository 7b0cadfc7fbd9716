"""One claimed occurrence of a job, run to the end: an ordinary session (source `cron`) with its own
sandbox, retried with backoff when it fails, its history written and its result delivered."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends import SandboxError

from ..agent.agent import Agent
from ..events import Event
from ..skills.library import SkillError
from ..store import StoreError
from .delivery import DeliveryContext, Message, deliver
from .jobs import Claim, JobStore
from .records import SILENT, JobRecord

log = logging.getLogger(__name__)
RESULT_CHARS = 20_000
"""Characters of a reply kept in the run's history (the session keeps all of it)."""


@dataclass
class Attempt:
    run_id: int
    status: str
    """ok, silent or failed."""
    text: str
    error: str | None
    session_id: str


class Runner:
    """Runs claims for one profile. `agent_for(model)` gives the agent (shared store) for a job's model."""

    def __init__(
        self,
        jobs: JobStore,
        agent_for: Callable[[str | None], Agent],
        owner: str,
        delivery: DeliveryContext,
        *,
        lease_seconds: float,
        run_timeout: float,
    ) -> None:
        self.jobs = jobs
        self.agent_for = agent_for
        self.owner = owner
        self.delivery = delivery
        self.lease_seconds = lease_seconds
        self.run_timeout = run_timeout

    async def run(self, claim: Claim) -> Attempt | None:
        """Run one attempt of the claim and free the job: a failure with retries left keeps its next try
        in the job's row (backoff doubling), the last attempt's outcome is delivered. None when skipped."""
        job = claim.job
        if claim.skip:
            now = time.time()
            await asyncio.to_thread(
                self.jobs.start_run,
                job.id,
                claim.scheduled_for,
                0,
                self.owner,
                status="skipped",
                finished_at=now,
                error="missed while no scheduler was running (catch_up: none)",
            )
            return None
        renewing = asyncio.create_task(self._renew(job.id))
        attempt: Attempt | None = None
        retry: tuple[float, float, int] | None = None
        try:
            attempt = await self._attempt(job, claim.scheduled_for, claim.attempt)
            if attempt.status == "failed" and claim.attempt < job.max_retries:
                delay = job.retry_backoff * 2**claim.attempt
                log.info(
                    "job %s: attempt %d failed (%s); retry in %.0fs",
                    job.id,
                    claim.attempt + 1,
                    attempt.error,
                    delay,
                )
                retry = (time.time() + delay, claim.scheduled_for, claim.attempt + 1)
            else:
                await _to_its_end(self._deliver(job, claim.scheduled_for, attempt, tries=claim.attempt + 1))
            return attempt
        except asyncio.CancelledError:  # stopped mid-run, as a killed run is reaped: tried again on start
            if attempt is None and claim.attempt < job.max_retries:
                retry = (time.time(), claim.scheduled_for, claim.attempt + 1)
            raise
        finally:
            renewing.cancel()
            status = attempt.status if attempt else "failed"
            await asyncio.to_thread(self.jobs.release, job.id, self.owner, status, time.time(), retry)

    async def _attempt(self, job: JobRecord, scheduled_for: float, number: int) -> Attempt:
        agent = self.agent_for(job.model)
        conversation = await asyncio.to_thread(
            agent.new_conversation, title=f"cron: {job.name}", source="cron", toolsets=job.toolsets
        )
        try:
            run_id = await asyncio.to_thread(
                self.jobs.start_run, job.id, scheduled_for, number, self.owner, session_id=conversation.id
            )
        except StoreError:  # the job was removed meanwhile (or this attempt exists): nothing to run
            await asyncio.to_thread(conversation.close)
            raise
        started = time.perf_counter()
        errors: list[str] = []

        def collect(event: Event) -> None:
            if event.type == "error":
                errors.append(event.message)

        text, status = "", "failed"
        try:
            if job.workspace:
                await asyncio.to_thread(self._seed, agent, conversation.id, job.workspace)
            prompt = self._prompt(agent, job, conversation.id)
            turn = asyncio.create_task(conversation.run(prompt, collect))
            done, _ = await asyncio.wait({turn}, timeout=self.run_timeout)
            if not done:
                conversation.interrupt()
                errors.append(f"timed out after {self.run_timeout:g}s")
            end = await turn
            text = end.content
            if end.reason == "done":
                status = "silent" if text.strip() == SILENT else "ok"
            elif end.reason == "budget":
                errors.append(f"stopped at the iteration budget ({end.iterations} model calls)")
            elif end.reason == "interrupted" and not errors:
                errors.append("interrupted")
        except (SandboxError, SkillError, OSError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        except asyncio.CancelledError:  # the scheduler is stopping: say so in the history, then stop
            conversation.interrupt()
            self.jobs.finish_run(
                run_id, status="failed", finished_at=time.time(), error="the scheduler stopped"
            )
            raise
        finally:
            await asyncio.to_thread(conversation.close)
        error = "; ".join(errors) if status == "failed" else None
        await asyncio.to_thread(
            self.jobs.finish_run,
            run_id,
            status=status,
            finished_at=time.time(),
            duration_ms=(time.perf_counter() - started) * 1000,
            result=text[:RESULT_CHARS],
            error=error,
        )
        return Attempt(run_id, status, text, error, conversation.id)

    def _prompt(self, agent: Agent, job: JobRecord, session_id: str) -> str:
        """The job's prompt, after the instructions of the skills it preloads."""
        parts = [
            f'<skill name="{name}">\n{agent.skills.view(name, session_id=session_id)}\n</skill>'
            for name in job.skills
        ]
        return "\n\n".join([*parts, job.prompt])

    def _seed(self, agent: Agent, session_id: str, workspace: str) -> None:
        """Copy the workspace directory's contents into the session's sandbox before the run starts."""
        source = self.delivery.home / workspace
        if not source.is_dir():
            raise OSError(f"workspace {workspace!r} is not a directory in {self.delivery.home}")
        sandbox = agent.sandboxes.get(session_id)
        for child in sorted(Path(source).iterdir()):
            sandbox.upload(child, ".")

    async def _deliver(self, job: JobRecord, scheduled_for: float, attempt: Attempt, tries: int) -> None:
        if attempt.status == "silent" or not job.deliver:
            return
        if attempt.status == "failed":
            text = f"Job {job.name!r} ({job.id}) failed after {tries} attempt(s): {attempt.error}"
        else:
            text = attempt.text
        message = Message(
            job_id=job.id,
            job_name=job.name,
            run_id=attempt.run_id,
            status="failed" if attempt.status == "failed" else "ok",
            text=text,
            session_id=attempt.session_id,
            scheduled_for=scheduled_for,
            finished_at=time.time(),
        )
        outcomes = await deliver(job.deliver, message, self.delivery)
        await asyncio.to_thread(self.jobs.finish_run, attempt.run_id, deliveries=outcomes)

    async def _renew(self, job_id: str) -> None:
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            until = time.time() + self.lease_seconds
            if not await asyncio.to_thread(self.jobs.renew, job_id, self.owner, until):
                log.warning("job %s: lost its lease", job_id)
                return


async def _to_its_end(work: Coroutine[Any, Any, None]) -> None:
    """Await `work` to its end even when cancelled meanwhile, then raise the cancellation: a run stopped
    while it delivers has its reply made and its history written, so its deliveries (each bounded by its
    own timeout) finish rather than leave a run marked ok that reached some targets and not others."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise
