"""Watching files in a sandbox: the runtime's inotify events (fs.watch), streamed over the channel into a
bounded queue here. `Sandbox.watch(path)` returns a Watch; iterate it, or `get` with a timeout."""

from __future__ import annotations

import collections
import contextlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from sandboxes.contract import FsWatchParams

from .errors import SandboxError
from .network import Ingress
from .runtime_client import Runtime

EventKind = Literal["create", "modify", "delete", "move", "overflow"]
KINDS = frozenset(get_args(EventKind))
QUEUE_SIZE = 10_000


class Caller(Protocol):
    """What a watch needs of its sandbox (backends.base.Sandbox)."""

    @property
    def runtime(self) -> Runtime: ...


@dataclass(frozen=True)
class FileEvent:
    """One change: `path` (absolute, inside the sandbox); `source` is where a move came from; an
    `overflow` says `dropped` events were lost (the kernel's queue, the runtime's or this one's)."""

    kind: EventKind
    path: str = ""
    source: str | None = None
    is_dir: bool = False
    dropped: int = 0

    def describe(self) -> str:
        if self.kind == "overflow":
            return f"overflow: {self.dropped} events were lost; look at the files themselves"
        what = f"{self.source} -> {self.path}" if self.kind == "move" else self.path
        return f"{self.kind} {what}{'/' if self.is_dir else ''}"


class Watch:
    """A running watch on a path in a sandbox, until `close` (or the path goes away)."""

    def __init__(
        self,
        sandbox: Caller,
        path: str,
        recursive: bool = True,
        debounce: float = 0.005,
        limit: int = 1000,
        queue_size: int = QUEUE_SIZE,
        timeout: float = 30.0,
    ) -> None:
        self.sandbox = sandbox
        self.id = "w" + secrets.token_hex(6)
        self.path = path
        """The watched path as the runtime resolved it, once watching."""
        self._size = queue_size
        self._queue: collections.deque[FileEvent] = collections.deque()
        self._dropped = 0
        self._cond = threading.Condition()
        self._armed = False
        self.ended: str | None = None
        self.error: Exception | None = None
        params: FsWatchParams = {
            "id": self.id,
            "path": path,
            "recursive": recursive,
            "debounce": debounce,
            "limit": limit,
        }
        self._thread = threading.Thread(
            target=self._run, args=(params,), name="watch-" + self.id, daemon=True
        )
        self._thread.start()
        with self._cond:
            if not self._cond.wait_for(lambda: self._armed or self.ended is not None, timeout):
                raise SandboxError(f"the watch on {path} did not start within {timeout} s")
        if self.error is not None:
            raise self.error

    def _run(self, params: FsWatchParams) -> None:
        try:
            result = self.sandbox.runtime.fs_watch(**params, call_timeout=None, on_notify=self._on_events)
            ended = str(result.get("ended", "stopped"))
        except Exception as exc:  # the runtime refused (no such path) or the sandbox went away
            self.error, ended = exc, str(exc)
        with self._cond:
            self.ended = ended
            self._cond.notify_all()

    def _on_events(self, method: str, params: dict[str, Any]) -> None:
        with self._cond:
            if not self._armed:
                self._armed = True
                self.path = str(params.get("path", self.path))
            for raw in params.get("events", []):
                event = _event(raw)
                if self._dropped and len(self._queue) < self._size:
                    self._queue.append(FileEvent("overflow", dropped=self._dropped))
                    self._dropped = 0
                if len(self._queue) < self._size:
                    self._queue.append(event)
                else:
                    self._dropped += event.dropped or 1
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> FileEvent | None:
        """The next event, waiting up to `timeout` seconds (None: until one comes or the watch ends)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._queue and not self._dropped and self.ended is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            if self._queue:
                return self._queue.popleft()
            if self._dropped:
                dropped, self._dropped = self._dropped, 0
                return FileEvent("overflow", dropped=dropped)
            return None

    def drain(self) -> list[FileEvent]:
        """Every event already queued, without waiting."""
        events = []
        while (event := self.get(0)) is not None:
            events.append(event)
        return events

    def __iter__(self) -> Iterator[FileEvent]:
        while (event := self.get()) is not None:
            yield event

    def close(self) -> None:
        """Stop watching; events already queued stay readable."""
        if self.ended is None:
            with contextlib.suppress(SandboxError):  # the sandbox is gone: so is the watch
                self.sandbox.runtime.fs_unwatch(id=self.id, call_timeout=30)
        self._thread.join(timeout=30)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def watch_from_host(ingress: Ingress, path: str) -> tuple[str, Iterator[FileEvent]]:
    """Watch a path in a sandbox another process on this host holds, through its ingress socket (local
    with bubblewrap, docker): the resolved path and the events, until the path goes or the caller stops.
    Raises OSError (no such sandbox here, or no ingress) and SandboxError (the runtime refused)."""
    sock = ingress.connect()
    sock.sendall(f"watch {path}\n".encode("utf-8", "surrogateescape"))
    lines = sock.makefile("rb")
    first = json.loads(lines.readline() or b'{"error": "the sandbox closed the connection"}')
    if "error" in first:
        sock.close()
        raise SandboxError(f"cannot watch {path}: {first['error']}")

    def events() -> Iterator[FileEvent]:
        try:
            for line in lines:
                raw = json.loads(line)  # from inside the sandbox: shapes checked by _event
                if "ended" in raw:
                    return
                yield _event(raw)
        finally:
            sock.close()

    return str(first["watching"]), events()


def _event(raw: dict[str, Any]) -> FileEvent:
    if raw.get("kind") not in KINDS:
        raise SandboxError(f"the runtime sent an event of no known kind: {str(raw)[:200]}")
    return FileEvent(
        kind=raw["kind"],
        path=str(raw.get("path", "")),
        source=raw.get("from"),
        is_dir=bool(raw.get("dir", False)),
        dropped=int(raw.get("dropped", 0)),
    )
