"""Runs this server drives in the background (evaluations, batches): each run's results as they come, for
any number of followers, kept per kind of run and keyed by (profile, run id); one run of a kind at a time
per profile. The routes of each kind read a run that no server drives from its directory."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from fastapi import HTTPException, Request, status
from fastapi.sse import ServerSentEvent
from pydantic import BaseModel

T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)
RETRY_RUNNING = 60
"""Retry-After when the profile already has a run of that kind going."""


class Progress(Generic[T]):
    """A run's results so far (those on disk at its start first), numbered from 1 in the order they came."""

    def __init__(self, results: list[T], total: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.results = results
        self.total = total
        self.running = True
        self._wake = asyncio.Event()

    def publish(self, result: T | None) -> None:
        """On the event loop: a result, or None when the run is over."""
        if result is None:
            self.running = False
        else:
            self.results.append(result)
        self._wake.set()
        self._wake = asyncio.Event()

    def arrived(self, result: T) -> None:
        """From the run's thread: one result."""
        self._tell(result)

    def _tell(self, result: T | None) -> None:
        """`publish` on the event loop; once the server has stopped (its loop closed) no one follows."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: the results are on disk
            self.loop.call_soon_threadsafe(self.publish, result)

    def drive(self, name: str, work: Callable[[], None], after: Callable[[], None]) -> None:
        """`work` on a thread of its own, then `after` (the summary, closing) whatever happened."""

        def run() -> None:
            try:
                work()
            finally:
                try:
                    after()
                finally:
                    self._tell(None)

        threading.Thread(target=run, name=name, daemon=True).start()

    async def follow(self, after: int) -> AsyncIterator[tuple[int, T | None]]:
        """Results numbered after `after`, each as it comes; (n, None) once the run is over."""
        while True:
            wake = self._wake
            while after < len(self.results):
                after += 1
                yield after, self.results[after - 1]
            if not self.running:
                yield after + 1, None
                return
            await wake.wait()


def runs(request: Request, kind: str) -> dict[tuple[str, str], Progress[Any]]:
    """This server's runs of one kind ("evals", "batches")."""
    state = request.app.state
    if not hasattr(state, "runs"):
        state.runs = {}
    kinds: dict[str, dict[tuple[str, str], Progress[Any]]] = state.runs
    return kinds.setdefault(kind, {})


def admit(request: Request, kind: str, profile: str, what: str) -> None:
    """A 429 when the profile already has a run of this kind going."""
    if any(p == profile and run.running for (p, _), run in runs(request, kind).items()):
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"this profile already has {what} running; wait for it to finish",
            headers={"Retry-After": str(RETRY_RUNNING)},
        )


def directory_of(home: Path, run_id: str, record: str, what: str) -> Path:
    """A run's directory under `home` (the profile's), which has its record file; else a 404."""
    directory = home / run_id
    if not (directory / record).is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no {what} {run_id}")
    return directory


async def stream(
    progress: Progress[R] | None,
    stored: Callable[[], list[R]],
    summary: Callable[[], dict[str, Any] | None],
    event: str,
    last_event_id: str | None,
) -> AsyncIterator[ServerSentEvent]:
    """A run's results as server-sent events: `event` per result (`id` its number, so Last-Event-ID
    resumes after it), then `end` with `summary()`. A run this server does not drive replays `stored()`."""
    after = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0
    if progress is None:
        for n, result in enumerate(stored()[after:], after + 1):
            yield ServerSentEvent(data=result.model_dump(), event=event, id=str(n))
        yield ServerSentEvent(data=summary(), event="end")
        return
    async for n, found in progress.follow(after):
        if found is None:
            yield ServerSentEvent(data=summary(), event="end", id=str(n))
            return
        yield ServerSentEvent(data=found.model_dump(), event=event, id=str(n))
