"""The profile's sandboxes and what each costs now: `GET /sandboxes`, `GET /sandboxes/{id}/stats`.
Mounted by api/app.py."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status
from pydantic import BaseModel

from backends import Sandbox
from backends.errors import SandboxError
from backends.stats import SandboxStats

from .bounds import AUTHENTICATED, errors
from .profiles import Auth

router = APIRouter(prefix="/sandboxes", tags=["sandbox"], responses=AUTHENTICATED)
SandboxId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="The sandbox id (hm-...)")]


class HeldSandbox(BaseModel):
    sandbox_id: str
    session_id: str
    backend: str
    stats: SandboxStats | None
    """None when it could not be read (the sandbox is being recreated, or went away)."""


def _reading(sandbox: Sandbox) -> SandboxStats | None:
    try:
        return sandbox.stats()
    except SandboxError:
        return None


@router.get("")
async def list_sandboxes(profile: Auth) -> list[HeldSandbox]:
    """The sandboxes this profile's sessions hold now, each with a reading of its cost."""
    held = profile.agent.sandboxes.holding()

    def read() -> list[HeldSandbox]:
        return [
            HeldSandbox(sandbox_id=sb.id, session_id=session, backend=sb.backend, stats=_reading(sb))
            for session, sb in held.items()
        ]

    return await asyncio.to_thread(read)


@router.get("/{sandbox_id}/stats", responses=errors(404))
async def sandbox_stats(profile: Auth, sandbox_id: SandboxId) -> SandboxStats:
    """CPU time and percent, memory now and at its peak, pids, the workspace's disk use and the egress
    bytes of one of this profile's sandboxes (from its cgroup on local and docker). 404: no sandbox of
    this profile has that id, or it ended."""
    found = next((sb for sb in profile.agent.sandboxes.holding().values() if sb.id == sandbox_id), None)
    stats = await asyncio.to_thread(_reading, found) if found is not None else None
    if stats is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no sandbox {sandbox_id} in this profile")
    return stats
