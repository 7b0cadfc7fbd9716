"""Snapshots and checkpoints over HTTP: the same operations as `hermetic snapshot` and `hermetic sessions
checkpoints|rollback|fork`, for the caller's profile. Mounted by api/app.py."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field

from backends import Backend, SandboxError
from backends.snapshots import NoSuchSnapshot, SnapshotError

from ..checkpoints import NoSuchCheckpoint
from ..sandbox_manager import SandboxLimit, choose_backend
from ..store import SessionRecord
from .bounds import AUTHENTICATED, errors
from .profiles import Auth

router = APIRouter(tags=["snapshots"], responses=AUTHENTICATED)
Responses = dict[int | str, dict[str, Any]]
NOT_FOUND: Responses = {404: {"description": "No such snapshot, session or checkpoint in this profile"}}
REFUSED: Responses = {400: {"description": "The snapshot's record is damaged or it cannot be used here"}}
BUSY: Responses = {409: {"description": "The session is running a turn, or has no sandbox to snapshot"}}


class Label(BaseModel):
    label: str | None = Field(None, max_length=200)


class RollbackTo(BaseModel):
    n: int = Field(ge=1)
    """The checkpoint's number (GET /sessions/{id}/checkpoints)."""


def _errors(action: Any) -> Any:
    try:
        return action()
    except (NoSuchSnapshot, NoSuchCheckpoint, KeyError) as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc).strip("'")) from exc
    except SandboxLimit:  # 429, as on every route (the app's handler)
        raise
    except (SnapshotError, SandboxError) as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc


def _backend(profile: Auth, family: str) -> Backend:
    """The backend holding a snapshot's copy: the profile's own, or the one of that family."""
    sandboxes = profile.agent.sandboxes
    if sandboxes.backend.family == family:
        return sandboxes.backend
    backend, _ = choose_backend(profile.settings, family)
    backend.snapshots = sandboxes.snapshots
    return backend


def _own_session(profile: Auth, session_id: str) -> None:
    if profile.agent.store.get_session(session_id, profile.settings.profile) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no session {session_id}")


@router.get("/snapshots")
def list_snapshots(profile: Auth, owner: str | None = None) -> dict[str, Any]:
    """This profile's snapshots, oldest first, with their total disk use and any damaged records."""
    store = profile.agent.sandboxes.snapshots
    snapshots = store.list(owner=owner)
    return {
        "snapshots": [s.summary() for s in snapshots],
        "bytes": sum(s.bytes for s in snapshots),
        "damaged": store.damaged(),
    }


@router.get("/snapshots/{snapshot_id}", responses={**NOT_FOUND, **REFUSED})
def show_snapshot(profile: Auth, snapshot_id: str) -> dict[str, Any]:
    return _errors(lambda: profile.agent.sandboxes.snapshots.get(snapshot_id).summary())  # type: ignore[no-any-return]


@router.patch("/snapshots/{snapshot_id}", responses={**NOT_FOUND, **REFUSED})
def label_snapshot(profile: Auth, snapshot_id: str, body: Label) -> dict[str, Any]:
    return _errors(lambda: profile.agent.sandboxes.snapshots.relabel(snapshot_id, body.label).summary())  # type: ignore[no-any-return]


@router.delete("/snapshots/{snapshot_id}", responses={**NOT_FOUND, **REFUSED})
def delete_snapshot(profile: Auth, snapshot_id: str) -> dict[str, bool]:
    store = profile.agent.sandboxes.snapshots

    def delete() -> None:
        try:
            family = store.get(snapshot_id).backend
        except NoSuchSnapshot:
            raise
        except SnapshotError:  # a damaged record: only the record is left to remove
            store.forget(snapshot_id)
            return
        _backend(profile, family).delete_snapshot(snapshot_id)

    _errors(delete)
    return {"deleted": True}


@router.post("/sessions/{session_id}/snapshot", status_code=201, responses={**NOT_FOUND, **REFUSED, **BUSY})
def snapshot_session(profile: Auth, session_id: str, body: Label | None = None) -> dict[str, Any]:
    """Snapshot the session's running sandbox (owned by the session, so retention counts it there)."""
    _own_session(profile, session_id)
    sandbox = profile.agent.sandboxes.peek(session_id)
    if sandbox is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"session {session_id} has no sandbox running")
    label = body.label if body else None
    return _errors(lambda: sandbox.snapshot(label=label, owner=session_id).summary())  # type: ignore[no-any-return]


@router.get("/sessions/{session_id}/checkpoints", responses=NOT_FOUND)
def list_checkpoints(profile: Auth, session_id: str) -> list[dict[str, Any]]:
    _own_session(profile, session_id)
    return [{"n": int(c.meta["n"]), **c.summary()} for c in profile.agent.checkpoints.list(session_id)]


@router.post("/sessions/{session_id}/rollback", responses={**NOT_FOUND, **REFUSED, **BUSY})
def rollback(profile: Auth, session_id: str, body: RollbackTo) -> dict[str, Any]:
    """Restore the session's sandbox to checkpoint `n` (now, or when it next needs one); the agent is
    told with its next tool result."""
    _own_session(profile, session_id)
    live = profile.live.get(session_id)
    if live is not None and live.conversation.running:
        raise HTTPException(status.HTTP_409_CONFLICT, "the session is running a turn: interrupt it first")
    running = profile.agent.sandboxes.peek(session_id) is not None
    checkpoint = _errors(lambda: profile.agent.checkpoints.rollback(session_id, body.n))
    return {"checkpoint": checkpoint.summary(), "applied": "now" if running else "when the session next runs"}


@router.post("/sessions/{session_id}/fork", status_code=201, responses={**NOT_FOUND, **errors(429)})
def fork_session(profile: Auth, session_id: str) -> SessionRecord:
    """A new session with a copy of this one's history and of its sandbox (429 when that copy would be
    over limits.max_sandboxes)."""
    _own_session(profile, session_id)
    conversation = _errors(lambda: profile.agent.fork_session(session_id))
    profile.open_session(conversation)
    record = profile.agent.store.get_session(conversation.id, profile.settings.profile)
    assert record is not None
    return record
