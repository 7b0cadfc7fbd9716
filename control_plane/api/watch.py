"""A session's sandbox files as they change: `GET /sessions/{id}/watch?path=`, Server-Sent Events.
Mounted by api/app.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query, status
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel

from backends.errors import RuntimeCallError, SandboxError
from backends.watch import Watch

from ..sandbox_manager import SandboxLimit
from .bounds import AUTHENTICATED, errors
from .profiles import RETRY_SANDBOX, Auth, Live

router = APIRouter(prefix="/sessions/{session_id}", tags=["sandbox"], responses=AUTHENTICATED)


class FileEventOut(BaseModel):
    kind: str
    """create, modify, delete, move, or overflow (`dropped` events were lost: look at the files)."""
    path: str
    """Absolute, inside the sandbox."""
    source: str | None = None
    """Where a move came from."""
    is_dir: bool = False
    dropped: int = 0


def _open(
    profile: Auth,
    live: Live,
    path: Annotated[str, Query(min_length=1, max_length=4096, description="A path in the sandbox")],
    recursive: Annotated[bool, Query(description="Also the directories under it")] = True,
) -> Watch:
    """The watch, opened before the response starts, so a refusal is an HTTP status, not a broken stream
    (a plain dependency: FastAPI runs it in a thread; the stream closes the watch)."""
    try:
        sandbox = profile.agent.sandboxes.get(live.conversation.id)
    except SandboxLimit as exc:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS, str(exc), headers={"Retry-After": str(RETRY_SANDBOX)}
        ) from None
    try:
        return sandbox.watch(path, recursive=recursive)
    except RuntimeCallError as exc:  # no such path, outside the sandbox's roots
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"cannot watch {path}: {exc.message}") from None
    except SandboxError as exc:
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, f"the session's sandbox cannot watch: {exc}"
        ) from None


@router.get("/watch", response_class=EventSourceResponse, responses=errors(400, 404, 429))
async def watch(watcher: Annotated[Watch, Depends(_open)]) -> AsyncIterator[ServerSentEvent]:
    """Changes under a path in the session's sandbox as they happen (inotify inside, debounced): a first
    `watching` event with the resolved path, then each change as an event named for its kind (create,
    modify, delete, move, overflow); the stream ends with `ended` when the watched path goes away.
    400: the path does not exist or is outside the sandbox's roots; 429: the profile holds
    limits.max_sandboxes already (Retry-After)."""
    try:
        yield ServerSentEvent(data={"path": watcher.path}, event="watching")
        while (event := await asyncio.to_thread(watcher.get)) is not None:
            out = FileEventOut(
                kind=event.kind,
                path=event.path,
                source=event.source,
                is_dir=event.is_dir,
                dropped=event.dropped,
            )
            yield ServerSentEvent(data=out.model_dump(), event=event.kind)
        yield ServerSentEvent(data={"reason": watcher.ended}, event="ended")
    finally:  # the client went away, or the path did: stop the watch in the sandbox
        await asyncio.to_thread(watcher.close)
