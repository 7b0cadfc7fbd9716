"""What the console's status page shows: doctor's checks of this machine for the caller's profile, and
each configured chat platform as the gateway last recorded it (in this process or another). Mounted by
api/app.py."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from ..doctor import Check, run_checks
from ..gateway.status import PlatformReport, platform_reports
from .bounds import AUTHENTICATED, errors
from .profiles import Auth

router = APIRouter(prefix="/status", tags=["status"], responses=AUTHENTICATED)


class Checks(BaseModel):
    checks: list[Check]
    """Each row: name, status (ok, warn, fail, or skip: it needs what another check found missing),
    detail, and fix (the command or setting that fixes it, when there is one)."""
    failed: int
    """Rows with status fail (`hermetic doctor` exits 1 when there is any)."""
    model_called: bool


class GatewayReport(BaseModel):
    platforms: list[PlatformReport]
    """The platforms of the profile's config.yaml (gateway:), none when it configures none."""


@router.get("/checks", responses=errors(401))
async def checks(
    profile: Auth,
    call_model: Annotated[
        bool, Query(description="Also send the model one short request (it costs a call)")
    ] = False,
) -> Checks:
    """`hermetic doctor` for the caller's profile: dockerd, sandbox images, bubblewrap, Chromium, sshd,
    the backend, database, recall, snapshots and the model, each with its fix. Takes up to ~15 s (a
    check that hangs becomes a failed row)."""
    found = await asyncio.to_thread(run_checks, profile.settings, not call_model)
    failed = sum(row.status == "fail" for row in found)
    return Checks(checks=found, failed=failed, model_called=call_model)


@router.get("/gateway", responses=errors(401))
async def gateway(profile: Auth) -> GatewayReport:
    """Each configured chat platform: its state and since when, its latest errors, its last message and
    the messages waiting for an answer."""
    return GatewayReport(platforms=await asyncio.to_thread(platform_reports, profile.settings))
