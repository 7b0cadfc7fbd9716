"""Scheduled jobs over HTTP (the same operations as `hermetic cron`), and the schedulers a server runs:
one per profile found on disk, started and stopped with the app. Mounted by api/app.py."""

from __future__ import annotations

import asyncio
import weakref
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request, status

from ..config.settings import Settings
from ..scheduler import JobError, JobRecord, JobSpec, JobStore, RunRecord, Scheduler, profiles_on_disk, wake
from ..store import Store
from ..tools import TOOLS
from .bounds import AUTHENTICATED
from .profiles import Auth, Hub, Profile

router = APIRouter(prefix="/cron", tags=["cron"], responses=AUTHENTICATED)


async def start_schedulers(app: FastAPI, hub: Hub, base: Settings, root: Path) -> None:
    """Run the due jobs of every profile on disk in this server (unless scheduler.enabled is off)."""
    app.state.schedulers = {}
    if not base.scheduler.enabled:
        return
    for name in profiles_on_disk(root, base.profile):
        profile = await asyncio.to_thread(hub.profile, name)
        if profile.settings.scheduler.enabled:
            scheduler = Scheduler(profile.settings, agent=profile.agent)
            await scheduler.start()
            app.state.schedulers[name] = scheduler


async def stop_schedulers(app: FastAPI) -> None:
    for scheduler in getattr(app.state, "schedulers", {}).values():
        await scheduler.stop()


_job_stores: weakref.WeakKeyDictionary[Store, JobStore] = weakref.WeakKeyDictionary()


def _jobs(profile: Profile) -> JobStore:
    """The profile's job store, made once per database (making one checks the tables)."""
    store = profile.agent.store
    if store not in _job_stores:
        _job_stores[store] = JobStore(store)
    return _job_stores[store]


def _job(profile: Profile, job_id: str) -> JobRecord:
    job = _jobs(profile).get(profile.settings.profile, job_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    return job


@router.get("/jobs")
def list_jobs(profile: Auth) -> list[JobRecord]:
    return _jobs(profile).all(profile.settings.profile)


@router.post("/jobs", status_code=status.HTTP_201_CREATED, responses={400: {"description": "Refused"}})
def create_job(profile: Auth, spec: JobSpec) -> JobRecord:
    """A new job; 400 with the reason when its schedule, targets or toolsets cannot be used."""
    settings = profile.settings
    try:
        job = _jobs(profile).add(
            settings.profile,
            spec,
            tz=settings.scheduler.timezone,
            created_by="api",
            known_toolsets=TOOLS.toolsets,
        )
    except JobError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc
    wake(settings.profile)
    return job


@router.get("/jobs/{job_id}", responses={404: {"description": "No such job"}})
def get_job(profile: Auth, job_id: str) -> JobRecord:
    return _job(profile, job_id)


@router.post("/jobs/{job_id}/pause", responses={404: {"description": "No such job"}})
def pause_job(profile: Auth, job_id: str) -> JobRecord:
    _job(profile, job_id)
    return _jobs(profile).set_paused(profile.settings.profile, job_id, True)


@router.post("/jobs/{job_id}/resume", responses={404: {"description": "No such job"}})
def resume_job(profile: Auth, job_id: str) -> JobRecord:
    _job(profile, job_id)
    job = _jobs(profile).set_paused(profile.settings.profile, job_id, False)
    wake(profile.settings.profile)
    return job


@router.delete(
    "/jobs/{job_id}", status_code=status.HTTP_204_NO_CONTENT, responses={404: {"description": "No such job"}}
)
def delete_job(profile: Auth, job_id: str) -> None:
    if not _jobs(profile).remove(profile.settings.profile, job_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")


@router.post(
    "/jobs/{job_id}/run",
    status_code=status.HTTP_202_ACCEPTED,
    responses={404: {"description": "No such job"}, 409: {"description": "Running, or no scheduler here"}},
)
async def run_job(request: Request, profile: Auth, job_id: str) -> dict[str, Any]:
    """Start a run now, outside the schedule; follow it with /history."""
    job = _job(profile, job_id)
    scheduler: Scheduler | None = request.app.state.schedulers.get(profile.settings.profile)
    if scheduler is None:
        raise HTTPException(
            status.HTTP_409_CONFLICT, "the scheduler is off in this server (scheduler.enabled)"
        )
    if job.lease_owner is not None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} is running")
    scheduler.spawn_now(job_id)
    return {"started": True}


@router.get("/jobs/{job_id}/history", responses={404: {"description": "No such job"}})
def job_history(
    profile: Auth, job_id: str, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> list[RunRecord]:
    _job(profile, job_id)
    return _jobs(profile).history(profile.settings.profile, job_id, limit)
