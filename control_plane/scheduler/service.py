"""The scheduler of one profile, run inside `hermetic serve` (or the gateway): it sleeps until the next
occurrence, claims what is due under a lease in the database, and runs each claim as its own task."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import weakref
from pathlib import Path

from ..agent.agent import Agent
from ..config.settings import Settings
from ..store import Store
from .delivery import DeliveryContext
from .jobs import Claim, JobError, JobStore, process_id
from .runner import Attempt, Runner

log = logging.getLogger(__name__)
_live: weakref.WeakSet[Scheduler] = weakref.WeakSet()


def webhook_secret(settings: Settings) -> bytes:
    """The profile's webhook signing key: the configured one, else one made once and kept in the home."""
    configured = settings.scheduler.webhook_secret
    if configured is not None:
        return configured.get_secret_value().encode()
    path = settings.home / "scheduler" / "webhook.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.touch(mode=0o600)
        path.write_text(secrets.token_hex(32))
    return path.read_text().strip().encode()


def wake(profile: str) -> None:
    """Tell the schedulers of `profile` running in this process that its jobs changed."""
    for scheduler in list(_live):
        if scheduler.profile == profile:
            scheduler.wake()


class Scheduler:
    """Due jobs of one profile. `agent` (optional) is shared for jobs without a model of their own."""

    def __init__(self, settings: Settings, *, agent: Agent | None = None, store: Store | None = None) -> None:
        self.settings = settings
        self.profile = settings.profile
        self.store = store or (agent.store if agent else Store(str(settings.database_url)))
        self.jobs = JobStore(self.store)
        self.owner = process_id()
        self._agents: dict[str | None, Agent] = {None: agent} if agent else {}
        self._own: set[str | None] = set() if agent else {None}
        self.runner = Runner(
            self.jobs,
            self.agent_for,
            self.owner,
            DeliveryContext(settings.home, webhook_secret(settings)),
            lease_seconds=settings.scheduler.lease_seconds,
            run_timeout=settings.scheduler.run_timeout,
        )
        self.running: dict[str, asyncio.Task[Attempt | None]] = {}
        self._asked: set[asyncio.Task[Attempt | None]] = set()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def agent_for(self, model: str | None) -> Agent:
        """The agent for a job's model (the profile's own when None), opened on first use."""
        if model not in self._agents:
            settings = self.settings
            if model is not None:
                settings = settings.model_copy(
                    update={"model": settings.model.model_copy(update={"name": model})}
                )
            self._agents[model] = Agent(settings, store=self.store)
            self._own.add(model)
        return self._agents[model]

    # -- the loop --------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.create_task(self._run_forever(), name=f"scheduler-{self.profile}")
        _live.add(self)

    async def stop(self) -> None:
        """Stop claiming; interrupt runs still going (their history says so) and close the agents."""
        _live.discard(self)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        tasks = [*self.running.values(), *self._asked]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for model in self._own & set(self._agents):
            await asyncio.to_thread(self._agents[model].close)
        self._agents = {model: agent for model, agent in self._agents.items() if model not in self._own}

    def wake(self) -> None:
        """Look at the jobs again now (thread-safe)."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def _run_forever(self) -> None:
        poll = self.settings.scheduler.poll_seconds
        while True:
            self._wake.clear()
            try:
                for claim in await asyncio.to_thread(self.tick, time.time()):
                    self._spawn(claim)
                wake_at = await asyncio.to_thread(self.jobs.next_wake, self.profile)
            except Exception:  # the database away for a while must not end the scheduler
                log.exception("profile %s: scheduler tick failed; trying again in %ss", self.profile, poll)
                wake_at = None
            full = len(self.running) >= self.settings.scheduler.max_concurrent
            delay = poll if wake_at is None or full else min(max(wake_at - time.time(), 0.0), poll)
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)

    def tick(self, now: float) -> list[Claim]:
        """Free abandoned leases, then claim every due occurrence there is room for."""
        self.jobs.reap(self.profile, now)
        room = self.settings.scheduler.max_concurrent - len(self.running)
        claims: list[Claim] = []
        for job in self.jobs.due(self.profile, now):
            if len(claims) >= room:
                break
            if job.id in self.running:
                continue
            claim = self.jobs.claim(job, now, self.owner, self.settings.scheduler.lease_seconds)
            if claim is not None:
                claims.append(claim)
        return claims

    def _spawn(self, claim: Claim) -> asyncio.Task[Attempt | None]:
        task = asyncio.create_task(self.runner.run(claim), name=f"job-{claim.job.id}")
        self.running[claim.job.id] = task

        def done(_: asyncio.Task[Attempt | None]) -> None:
            self.running.pop(claim.job.id, None)
            if not task.cancelled() and task.exception() is not None:
                log.error("job %s failed in the scheduler", claim.job.id, exc_info=task.exception())
            self._wake.set()

        task.add_done_callback(done)
        return task

    # -- runs asked for ----------------------------------------------------------------------

    def spawn_now(self, job_id: str) -> asyncio.Task[Attempt | None]:
        """`run_now` as a task of its own (the API answers at once); failures are logged."""
        task = asyncio.create_task(self.run_now(job_id), name=f"job-{job_id}-now")
        self._asked.add(task)

        def done(_: asyncio.Task[Attempt | None]) -> None:
            self._asked.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.warning("job %s: run now failed: %s", job_id, task.exception())

        task.add_done_callback(done)
        return task

    async def run_now(self, job_id: str) -> Attempt | None:
        """Run the job once now, outside its schedule (`hermetic cron run`). Raises JobError."""
        job = await asyncio.to_thread(self.jobs.get, self.profile, job_id)
        if job is None:
            raise JobError(f"no job {job_id!r} in profile {self.profile!r}")
        lease = self.settings.scheduler.lease_seconds
        claim = await asyncio.to_thread(self.jobs.claim_now, job, time.time(), self.owner, lease)
        if claim is None:
            raise JobError(f"job {job_id} is running right now (lease held by {job.lease_owner})")
        while True:  # here, in the foreground: its retries too, each when its backoff has passed
            attempt = await self.runner.run(claim)
            job = await asyncio.to_thread(self.jobs.get, self.profile, job_id)
            if job is None or job.retry_at is None or job.retry_for != claim.scheduled_for:
                return attempt
            await asyncio.sleep(max(job.retry_at - time.time(), 0.0))
            retry = await asyncio.to_thread(
                self.jobs.claim, job, max(time.time(), job.retry_at), self.owner, lease
            )
            if retry is None:  # a server took the retry meanwhile
                return attempt
            claim = retry


def profiles_on_disk(root: Path, first: str) -> list[str]:
    """`first` and every profile with a home under root/profiles (whose jobs a server should run)."""
    names = [first]
    found = root / "profiles"
    if found.is_dir():
        names += sorted(p.name for p in found.iterdir() if p.is_dir() and p.name != first)
    return names
