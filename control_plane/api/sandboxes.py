"""The profile's sandboxes, what each costs now and where it reached out: `GET /sandboxes`,
`GET /sandboxes/{id}/stats`, `GET /sandboxes/{id}/audit`. Mounted by api/app.py."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status
from pydantic import BaseModel

from backends import Sandbox
from backends.errors import SandboxError
from backends.network import read_audit
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


class EgressDecision(BaseModel):
    """One connection the sandbox's egress proxy decided on (network: allowlist), as its audit log has it."""

    time: float
    host: str | None
    port: int | None
    method: str | None = None
    allowed: bool = False
    address: str | None = None
    """The address connected to, when allowed."""
    denied: str | None = None
    """The rule that refused it (not-allowed, private-address, protocol, ...)."""
    reason: str | None = None
    tls: bool | str | None = None
    credential: str | None = None
    """The name of the credential the proxy added to its requests (never its value)."""
    bytes_up: int = 0
    bytes_down: int = 0
    duration: float = 0.0


def _held(profile: Auth, sandbox_id: str) -> Sandbox:
    found = next((sb for sb in profile.agent.sandboxes.holding().values() if sb.id == sandbox_id), None)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no sandbox {sandbox_id} in this profile")
    return found


@router.get("/{sandbox_id}/audit", responses=errors(404))
async def sandbox_audit(
    profile: Auth,
    sandbox_id: SandboxId,
    limit: Annotated[int, Query(ge=1, le=5000, description="The most recent decisions")] = 200,
) -> list[EgressDecision]:
    """The egress proxy's decisions for one of this profile's sandboxes, newest first: host, port,
    allowed or the rule that denied it, bytes each way. Empty when it never used the network. 404: no
    sandbox of this profile has that id, or it ended."""
    _held(profile, sandbox_id)
    entries = await asyncio.to_thread(read_audit, sandbox_id)
    return [EgressDecision.model_validate(entry) for entry in reversed(entries[-limit:])]


@router.get("/{sandbox_id}/stats", responses=errors(404))
async def sandbox_stats(profile: Auth, sandbox_id: SandboxId) -> SandboxStats:
    """CPU time and percent, memory now and at its peak, pids, the workspace's disk use and the egress
    bytes of one of this profile's sandboxes (from its cgroup on local and docker). 404: no sandbox of
    this profile has that id, or it ended."""
    stats = await asyncio.to_thread(_reading, _held(profile, sandbox_id))
    if stats is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no sandbox {sandbox_id} in this profile")
    return stats
