"""A session's exposed ports over HTTP: open, list, close. Mounted by api/app.py."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field

from backends.network import ExposeError, Ingress, exposures, net_dir

from .bounds import AUTHENTICATED, errors
from .profiles import Auth, Live

router = APIRouter(
    prefix="/sessions/{session_id}/exposures", tags=["network"], responses={**AUTHENTICATED, **errors(404)}
)


class ExposeRequest(BaseModel):
    port: int = Field(gt=0, lt=65536)
    """The port a program in the session's sandbox listens on."""
    host_port: int = Field(0, ge=0, lt=65536)
    """The host port to listen on; 0 picks a free one."""


class ExposureOut(BaseModel):
    port: int
    host: str
    host_port: int
    url: str


def _ingress(profile: Auth, live: Live, *, create: bool) -> Ingress | None:
    """The ingress of the session's sandbox; None when it has no sandbox and `create` is false (listing
    or closing starts none). Starting one over limits.max_sandboxes is a 429 (the app's handler)."""
    sandboxes = profile.agent.sandboxes
    sandbox = sandboxes.get(live.conversation.id) if create else sandboxes.peek(live.conversation.id)
    if sandbox is not None and sandbox.ingress is None:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"the {sandbox.backend} backend cannot expose ports")
    return sandbox.ingress if sandbox is not None else None


@router.post("", status_code=status.HTTP_201_CREATED, responses=errors(409, 429))
def expose(profile: Auth, live: Live, body: ExposeRequest) -> ExposureOut:
    """Make a port inside the session's sandbox reachable on the server's host (network.expose_bind);
    starts the session's sandbox if it has none."""
    ingress = _ingress(profile, live, create=True)
    assert ingress is not None
    try:
        got = ingress.expose(body.port, profile.settings.network.expose_bind, body.host_port)
    except ExposeError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return ExposureOut(port=got.port, host=got.host, host_port=got.host_port, url=got.url)


@router.get("")
def list_exposures(profile: Auth, live: Live) -> list[ExposureOut]:
    ingress = _ingress(profile, live, create=False)
    return [
        ExposureOut(port=e.port, host=e.host, host_port=e.host_port, url=e.url)
        for e in (exposures(net_dir(ingress.sandbox_id)) if ingress is not None else [])
    ]


@router.delete("/{port}")
def close_exposure(profile: Auth, live: Live, port: int) -> dict[str, bool]:
    ingress = _ingress(profile, live, create=False)
    if ingress is None or not ingress.unexpose(port):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"port {port} is not exposed")
    return {"closed": True}
