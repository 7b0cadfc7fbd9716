"""Holding a sandbox still for the last pass of a copy: its cgroup frozen from this process where the
host lets it (what `docker pause` has runc do, without dockerd's and containerd's round trips), else
`docker pause` through the Engine API.

On this project's machine (cgroup v1, load 6) a freeze and thaw of the cgroup took 0.18 ms, a pause and
unpause through the API 15-18 ms; under load the API's share grows with every process it passes through.
A control plane in a container (compose, behind a socket proxy) sees no host cgroup and uses the API.
A container frozen by a control plane that died before the thaw is still removed by `docker rm -f`
(the reaper's), as one paused through the API is.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from docker.errors import APIError, NotFound

from .errors import SandboxError, SandboxGone

FREEZE_TIMEOUT = 10.0
"""Seconds a cgroup may take to freeze (every task stopped) before the copy is refused."""


class Pause(Protocol):
    def pause(self) -> None:
        """Stop every process of the sandbox; SandboxGone when it is not there to stop."""

    def resume(self) -> None:
        """Let them run on; SandboxGone when the sandbox vanished meanwhile."""


class ApiPause:
    """`docker pause` and `docker unpause` of the container named `name`."""

    def __init__(self, client: Any, name: str) -> None:
        self._api, self.name = client.api, name

    def pause(self) -> None:
        try:
            self._api.pause(self.name)
        except (NotFound, APIError) as exc:
            raise SandboxGone(f"container {self.name} is gone or not running: {exc}") from exc

    def resume(self) -> None:
        try:
            self._api.unpause(self.name)
        except NotFound as exc:
            raise SandboxGone(f"container {self.name} vanished during the copy") from exc


class CgroupFreezer:
    """The cgroup's own freezer: v1's `freezer.state` (FROZEN, read back until every task is), or v2's
    `cgroup.freeze`, whose `cgroup.events` says `frozen 1` once every task is (a change the kernel
    signals to poll)."""

    def __init__(self, directory: Path, v1: bool) -> None:
        self.directory, self.v1 = directory, v1

    @classmethod
    def of(cls, dirs: Mapping[str, Path]) -> CgroupFreezer | None:
        """The freezer of a sandbox's cgroup directories (by controller, "" for v2's unified one), or
        None when there is none this process may write (no cgroup read, a hybrid host, no root)."""
        if "freezer" in dirs:
            found, control = cls(dirs["freezer"], v1=True), dirs["freezer"] / "freezer.state"
        elif set(dirs) == {""}:
            found, control = cls(dirs[""], v1=False), dirs[""] / "cgroup.freeze"
        else:
            return None
        return found if os.access(control, os.W_OK) else None

    def pause(self) -> None:
        try:
            if self.v1:
                self._freeze_v1()
            else:
                self._freeze_v2()
        except OSError as exc:  # the directory went with the container
            raise SandboxGone(f"the sandbox's cgroup {self.directory} is gone: {exc}") from exc

    def resume(self) -> None:
        try:
            if self.v1:
                (self.directory / "freezer.state").write_text("THAWED")
            else:
                (self.directory / "cgroup.freeze").write_text("0")
        except OSError as exc:
            raise SandboxGone(f"the sandbox's cgroup {self.directory} vanished meanwhile: {exc}") from exc

    def _freeze_v1(self) -> None:
        state = self.directory / "freezer.state"
        state.write_text("FROZEN")
        deadline = time.monotonic() + FREEZE_TIMEOUT
        # reading the state moves a FREEZING cgroup on (the kernel retries the tasks not yet stopped);
        # it is FROZEN at the first read unless a task is in an uninterruptible wait
        while state.read_text().strip() != "FROZEN":
            if time.monotonic() > deadline:
                self._gave_up()
            os.sched_yield()

    def _freeze_v2(self) -> None:
        events = self.directory / "cgroup.events"
        with events.open("rb", buffering=0) as watched:
            poller = select.poll()
            poller.register(watched, select.POLLPRI)
            (self.directory / "cgroup.freeze").write_text("1")
            deadline = time.monotonic() + FREEZE_TIMEOUT
            while b"frozen 1" not in os.pread(watched.fileno(), 4096, 0):
                left = deadline - time.monotonic()
                if left <= 0:
                    self._gave_up()
                poller.poll(left * 1000)

    def _gave_up(self) -> None:
        self.resume()
        raise SandboxError(
            f"the sandbox's processes did not stop within {FREEZE_TIMEOUT:.0f} s (one is stuck in the "
            "kernel, e.g. on a hung mount): the copy was not made"
        )
