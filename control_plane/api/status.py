"""What the console's status page shows: doctor's checks of this machine for the caller's profile, and
each configured chat platform as the gateway last recorded it (in this process or another). Mounted by
api/app.py."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from ..doctor import Check, run_checks
from ..gateway.status import PlatformReport, platform_reports
from .bounds import AUTHENTICATED, errors
from .profiles import Auth

router = APIRouter(prefix="/status", tags=["status"], responses=AUTHENTICATED)
REUSED_FOR = 10.0
"""Seconds one run of the checks answers every caller of the profile: a run spawns processes and threads,
and a client asking in a loop must not multiply them."""


class Checks(BaseModel):
    checks: list[Check]
    """Each row: name, status (ok, warn, fail, or skip: it needs what another check found missing),
    detail, and fix (the command or setting that fixes it, when there is one)."""
    failed: int
    """Rows with status fail (`hermetic doctor` exits 1 when there is any)."""
    model_called: bool
    checked_at: float
    """When these checks ran (seconds since the epoch); callers within REUSED_FOR seconds get the same."""


class GatewayReport(BaseModel):
    platforms: list[PlatformReport]
    """The platforms of the profile's config.yaml (gateway:), none when it configures none."""


class _Runs:
    """The profile's last run of the checks (with and without the model call) and the lock that makes
    callers at the same time wait for one run."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.last: dict[bool, Checks] = {}


@router.get("/checks", responses=errors(401))
async def checks(
    profile: Auth,
    request: Request,
    call_model: Annotated[
        bool, Query(description="Also send the model one short request (it costs a call)")
    ] = False,
) -> Checks:
    """`hermetic doctor` for the caller's profile: dockerd, sandbox images, bubblewrap, Chromium, sshd,
    the backend, database, recall, snapshots and the model, each with its fix. Takes up to ~15 s (a
    check that hangs becomes a failed row); a run less than 10 s old answers again."""
    if not hasattr(request.app.state, "status_checks"):
        request.app.state.status_checks = {}
    runs: _Runs = request.app.state.status_checks.setdefault(profile.settings.profile, _Runs())
    async with runs.lock:
        last = runs.last.get(call_model)
        if last is None or time.time() - last.checked_at > REUSED_FOR:
            found = await asyncio.to_thread(run_checks, profile.settings, not call_model)
            failed = sum(row.status == "fail" for row in found)
            last = runs.last[call_model] = Checks(
                checks=found, failed=failed, model_called=call_model, checked_at=time.time()
            )
    return last


@router.get("/gateway", responses=errors(401))
async def gateway(profile: Auth) -> GatewayReport:
    """Each configured chat platform: its state and since when, its latest errors, its last message and
    the messages waiting for an answer."""
    return GatewayReport(platforms=await asyncio.to_thread(platform_reports, profile.settings))
