"""The one interface every backend implements: create a sandbox, talk to its runtime, close it."""

from __future__ import annotations

import base64
import functools
import io
import logging
import secrets
import tarfile
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Self, TypeVar, Unpack, cast

from sandboxes.contract import (
    FsUploadResult,
    Method,
    ShellRunOptions,
    ShellRunParams,
    ShellRunResult,
    ShellStateResult,
)

from .channel import Channel, NotifyFn
from .errors import SandboxError, SandboxGone, UnsupportedSpec
from .network import Egress, Ingress
from .runtime_client import Runtime
from .snapshots import NoSuchSnapshot, Snapshot, SnapshotError, SnapshotStore, new_snapshot_id
from .spec import SandboxSpec
from .stats import LimitCounts, SandboxStats, StatsReader, changes, limit_counts, read_cgroup
from .terminal import Terminals
from .watch import Watch

log = logging.getLogger("hermetic.backends")

MANAGED_LABEL = "org.hermetic.managed"
UPLOAD_CHUNK = 1 << 20
# Extra seconds a client waits beyond a command's own timeout before it calls the channel dead:
# the runtime needs up to ~4 s to escalate from SIGINT to SIGKILL to a session reset.
TIMEOUT_MARGIN = 30.0


def new_sandbox_id() -> str:
    return "hm-" + secrets.token_hex(6)


class Sandbox(ABC):
    """A running sandbox and the channel to its runtime.

    The channel is opened lazily and reopened after it dies: `_recover` brings the substrate back
    (a new container when the old one vanished) and the notice it returns is queued in
    `notices`, so the caller can tell the agent what was lost.
    """

    backend: ClassVar[str]
    egress: Egress | None = None
    """The sandbox's way out on `network: allowlist` (local and docker), else None."""
    ingress: Ingress | None = None
    """Its ports exposed on request (local with bwrap, docker), else None."""

    def __init__(self, sandbox_id: str, spec: SandboxSpec) -> None:
        self.id = sandbox_id
        self.spec = spec
        self.notices: list[str] = []
        self._channel: Channel | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.expires_at = time.time() + spec.ttl if spec.ttl else None
        self._ttl_timer: threading.Timer | None = None
        self.origin: Backend | None = None
        """The backend that made it (set by `Backend.opened`): snapshots and forks go through it."""
        self._copying = threading.Lock()  # one snapshot or fork at a time: docker cannot pause twice
        self.restoring: Snapshot | None = None
        """The snapshot this sandbox is being started from (spec.from_snapshot), while it opens."""
        if spec.ttl:  # destroyed at its ttl even if nobody uses or closes it
            self._ttl_timer = threading.Timer(spec.ttl, self.close)
            self._ttl_timer.daemon = True
            self._ttl_timer.start()

    # -- what a backend provides -----------------------------------------------------------

    @abstractmethod
    def _connect(self) -> Channel:
        """Start a runtime in the sandbox and return its channel, handshake done."""

    @abstractmethod
    def _recover(self) -> str:
        """The channel died: make the sandbox usable again; return what the caller lost."""

    @abstractmethod
    def _destroy(self) -> None:
        """Remove everything the sandbox holds. Must not raise when it is already gone."""

    def _provision(self) -> None:  # noqa: B027 (optional hook: local and ssh need none)
        """Create the substrate before the first connect (a container, a Modal sandbox)."""

    def open(self) -> Self:
        """Provision and start the runtime now, so errors surface at create time; on failure,
        whatever was created is removed again. With `spec.from_snapshot`, the workspace and shell
        sessions come from that snapshot (a bad id is refused before anything is created)."""
        if self.spec.from_snapshot and self.origin is not None:
            self.restoring = self.origin.snapshot_for(self.spec.from_snapshot)
        try:
            self._provision()
            _ = self.channel
            if self.restoring is not None:
                self._restore(self.restoring)
        except BaseException:
            self.close()
            raise
        finally:
            self.restoring = None
        return self

    def _restore(self, snapshot: Snapshot) -> None:
        try:
            self._seed_workspace(snapshot.location)
            self.runtime.shell_restore(state=cast(ShellStateResult, snapshot.shells), call_timeout=60)
        except UnsupportedSpec:
            raise
        except SandboxError as exc:
            raise SnapshotError(
                f"sandbox {self.id} could not be started from snapshot {snapshot.id}: {exc}"
            ) from exc

    # -- snapshots: what a backend provides ------------------------------------------------

    def prepare_snapshots(self) -> None:  # noqa: B027 (optional: only docker has something to prepare)
        """This sandbox will be snapshotted (the agent's checkpoints): get ready, so a snapshot waits for
        less. Docker keeps a copy helper made ahead."""

    def _snapshot_id(self) -> str:
        """The id of the snapshot about to be taken (docker: the one its helper made ahead was made for)."""
        return new_snapshot_id()

    def _save_workspace(self, snapshot_id: str) -> tuple[dict[str, str], int]:
        """Copy the workspace for a snapshot; returns its location and size. On failure, leave nothing."""
        raise UnsupportedSpec(f"the {self.backend} backend cannot snapshot sandboxes")

    def _seed_workspace(self, location: dict[str, str]) -> None:
        """Fill this (new, empty) sandbox's workspace from a snapshot's copy."""
        raise UnsupportedSpec(f"the {self.backend} backend cannot start sandboxes from snapshots")

    def _fork_workspace(self) -> Sandbox | None:
        """A new sandbox with a copy of this workspace, made more cheaply than snapshot + create; None
        when the backend has no such shortcut."""
        return None

    def _alive(self) -> bool:
        """A cheap local check that the substrate still runs (the stream's EOF may lag behind)."""
        return True

    def responsive(self, timeout: float = 2.0) -> bool:
        """Whether the runtime answers a ping on the channel already open, without reconnecting or
        recovering: the warm pool's check before it hands out a sandbox nobody has watched."""
        with self._lock:
            channel = self._channel
            expired = self.expires_at is not None and time.time() >= self.expires_at
            if self._closed or expired or channel is None or channel.closed or not self._alive():
                return False
        try:
            Runtime(channel.call).sys_ping(call_timeout=timeout)
        except SandboxError:
            return False
        return True

    def snapshot(
        self, label: str | None = None, *, owner: str | None = None, meta: dict[str, str] | None = None
    ) -> Snapshot:
        """Save the workspace and the shell sessions' cwd and exported variables (not processes).

        Raises SnapshotError (nothing is kept) when the sandbox vanishes during the copy."""
        with self._copying:
            return self._snapshot(label, owner, meta or {})

    def _snapshot(self, label: str | None, owner: str | None, meta: dict[str, str]) -> Snapshot:
        backend = self._backend_for_snapshots()
        shells = self.runtime.shell_state(call_timeout=60)
        snapshot_id = self._snapshot_id()
        created = time.time()
        location, size = self._copy_or_refuse(lambda: self._save_workspace(snapshot_id))
        snapshot = Snapshot(
            id=snapshot_id,
            backend=self.backend,
            created=created,
            bytes=size,
            label=label,
            source=self.id,
            owner=owner,
            workdir=self.spec.workdir,
            location=location,
            shells=shells,
            meta=meta,
        )
        if self._closed or not self._alive():
            backend.drop_snapshot_copy(snapshot)
            raise SnapshotError(f"sandbox {self.id} vanished while its snapshot was copied; nothing was kept")
        backend.snapshots.put(snapshot)
        log.info("sandbox %s: snapshot %s (%d bytes)", self.id, snapshot_id, size)
        return snapshot

    def fork(self) -> Sandbox:
        """A new sandbox with a copy of this one's workspace and shell sessions (cwd, exported
        variables; no processes). Both then change independently; the caller closes the new one."""
        backend = self._backend_for_snapshots()
        with self._copying:
            shells = self.runtime.shell_state(call_timeout=60)
            child = self._copy_or_refuse(self._fork_workspace)
        if child is None:  # snapshot + create, the snapshot removed again
            snapshot = self.snapshot(label=f"fork of {self.id}")
            try:
                return backend.create(self.spec.model_copy(update={"from_snapshot": snapshot.id}))
            finally:
                backend.delete_snapshot(snapshot.id)
        try:
            child.runtime.shell_restore(state=shells, call_timeout=60)
        except BaseException:
            child.close()
            raise
        return child

    def _backend_for_snapshots(self) -> Backend:
        if self.origin is None:
            raise UnsupportedSpec(f"sandbox {self.id} was not made by a backend's create: it cannot snapshot")
        return self.origin

    def _copy_or_refuse(self, copy: Callable[[], Any]) -> Any:
        """Run a workspace copy; a sandbox gone meanwhile becomes a clear SnapshotError."""
        try:
            return copy()
        except (SnapshotError, UnsupportedSpec):
            raise
        except (SandboxError, OSError) as exc:
            if isinstance(exc, SandboxGone) or self._closed or not self._alive():
                raise SnapshotError(
                    f"sandbox {self.id} vanished while its workspace was copied; nothing was kept"
                ) from exc
            raise SnapshotError(f"copying sandbox {self.id}'s workspace failed: {exc}") from exc

    # -- the channel -----------------------------------------------------------------------

    @property
    def channel(self) -> Channel:
        with self._lock:
            if self.expires_at is not None and time.time() >= self.expires_at:
                if not self._closed:
                    self._closed = True
                    threading.Thread(target=self._destroy, daemon=True).start()
                raise SandboxGone(f"sandbox {self.id} reached its ttl of {self.spec.ttl} s and was destroyed")
            if self._closed:
                raise SandboxGone(f"sandbox {self.id} is closed")
            if self._channel is None or self._channel.closed or not self._alive():
                if self._channel is not None:
                    self._channel.close()
                    notice = self._recover()
                    log.warning("sandbox %s: %s", self.id, notice)
                    self.notices.append(notice)
                self._channel = self._connect()
            return self._channel

    def call(
        self,
        method: Method,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = 120.0,
        on_notify: NotifyFn | None = None,
    ) -> Any:
        """One runtime request. Raises RuntimeCallError, SandboxGone, CallTimeout. Callers use
        `runtime`, which gives each method its params and result."""
        return self.channel.call(method, params, timeout=timeout, on_notify=on_notify)

    @functools.cached_property
    def runtime(self) -> Runtime:
        """The runtime's calls, typed (backends/runtime_client.py), over `call`."""
        return Runtime(self.call)

    def cgroup_dirs(self) -> dict[str, Path]:
        """The sandbox's own cgroup directories on this host, by controller ("" for v2's unified one);
        empty where the backend has none to read (ssh, Modal)."""
        return {}

    def stats(self) -> SandboxStats:
        """What the sandbox costs now: its cgroup's CPU, memory and pids where the host can read them,
        else its processes as the runtime sums them; the workspace's disk use; the egress bytes.
        Raises SandboxError."""
        runtime = self.runtime.sys_stats(call_timeout=60)
        return self._stats.reading(runtime, read_cgroup(self.cgroup_dirs()))

    def limits_hit(self) -> list[str]:
        """Limits the sandbox ran into since the last call (an OOM kill, a fork refused at pids.max), as
        sentences; from the cgroup's counters, without a call into the sandbox (empty without one)."""
        dirs = self.cgroup_dirs()
        counts = limit_counts(dirs)
        if counts is None:
            return []
        seen, self._limits_seen = self._limits_seen, counts
        return changes(seen, counts, dirs)

    @functools.cached_property
    def _stats(self) -> StatsReader:
        return StatsReader(self.id)

    _limits_seen = LimitCounts(0, 0)
    """Counted since the sandbox started: the first call reports what came before it."""

    @functools.cached_property
    def terminals(self) -> Terminals:
        """Interactive terminals in this sandbox: programs on a PTY, their screens rendered here."""
        return Terminals(self)

    def watch(self, path: str, recursive: bool = True, debounce: float = 0.005, limit: int = 1000) -> Watch:
        """Watch a path (a directory recursively, or a file) for create / modify / delete / move events,
        from now on: inotify in the runtime, batches `debounce` seconds apart at most `limit` long.
        Raises RuntimeCallError (no such path, outside the roots)."""
        return Watch(self, path, recursive, debounce, limit)

    def pop_notices(self) -> list[str]:
        notices, self.notices = self.notices, []
        return notices

    # -- conveniences over the protocol ----------------------------------------------------

    def run(
        self,
        command: str,
        *,
        session: str = "default",
        timeout: float = 120.0,
        on_output: Callable[[str], None] | None = None,
        **options: Unpack[ShellRunOptions],
    ) -> ShellRunResult:
        """Run a command in a persistent shell session; returns output, exit_code, cwd, ..."""
        params: ShellRunParams = {
            "command": command,
            "session": session,
            "timeout": timeout,
            "limit": self.spec.output_limit,
            "stream": on_output is not None,
            **options,
        }
        notify = (lambda method, p: on_output(p["text"])) if on_output else None
        return self.runtime.shell_run(**params, call_timeout=timeout + TIMEOUT_MARGIN, on_notify=notify)

    def upload(self, source: str | Path, dest: str) -> FsUploadResult:
        """Copy a host file or directory into the sandbox under `dest`, as a tar in chunks."""
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
            archive.add(str(source), arcname=Path(source).name)
        data = raw.getvalue()
        transfer = uuid.uuid4().hex
        result: FsUploadResult = {}
        for offset in range(0, max(len(data), 1), UPLOAD_CHUNK):
            chunk = data[offset : offset + UPLOAD_CHUNK]
            final = offset + UPLOAD_CHUNK >= len(data)
            result = self.runtime.fs_upload(
                transfer=transfer, dest=dest, final=final, data=base64.b64encode(chunk).decode()
            )
        return result

    def download(self, path: str, dest_dir: str | Path) -> Path:
        """Copy a sandbox file or directory into a host directory; returns the local path."""
        chunks: list[bytes] = []
        self.runtime.fs_download(
            path=path,
            call_timeout=600,
            on_notify=lambda method, p: chunks.append(base64.b64decode(p["data"])),
        )
        with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r") as archive:
            names = archive.getnames()
            archive.extractall(dest_dir, filter="data")
        return Path(dest_dir) / names[0].split("/")[0]

    # -- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            channel, self._channel = self._channel, None
        if self._ttl_timer is not None:
            self._ttl_timer.cancel()
        if channel is not None:
            channel.close()
        self._destroy()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


SandboxT = TypeVar("SandboxT", bound=Sandbox)


class Backend(ABC):
    """How a sandbox is obtained. Backends differ only in how they get a byte stream to the runtime."""

    name: ClassVar[str]
    lacks: ClassVar[dict[str, str]] = {}
    """Sandbox properties this backend does not provide by design ("isolation", "limits"), each with
    the reason. Conformance tests that assert one are skipped on this backend with that reason."""

    task_privileges: ClassVar[bool] = False
    """Whether it can run a sandbox with `privileges: task` (an evaluation task's own image)."""

    _snapshots: SnapshotStore | None = None

    @abstractmethod
    def create(self, spec: SandboxSpec) -> Sandbox:
        """Create and start a sandbox. Raises BackendUnavailable, UnsupportedSpec, HandshakeError,
        NoSuchSnapshot and SnapshotError (for `spec.from_snapshot`)."""

    def opened(self, sandbox: SandboxT) -> SandboxT:
        """Open a sandbox this backend made (every create ends here)."""
        if sandbox.spec.privileges == "task":
            if not self.task_privileges:
                raise UnsupportedSpec(
                    f"the {self.name} backend cannot run a task's own image (privileges: task)"
                )
            if sandbox.spec.mounts:
                raise UnsupportedSpec("a sandbox with privileges: task gets no host mounts")
        sandbox.origin = self
        return sandbox.open()

    def reap(self) -> int:
        """Remove sandboxes left behind by dead control planes or past their ttl; returns how many."""
        return 0

    # -- snapshots ------------------------------------------------------------------------

    @property
    def family(self) -> str:
        """Which sandboxes' snapshots this backend can use: its Sandbox class's `backend`."""
        return self.name

    @property
    def snapshots(self) -> SnapshotStore:
        """The snapshot registry; default ~/.hermetic/snapshots (the control plane sets its profile's)."""
        if self._snapshots is None:
            self._snapshots = SnapshotStore(Path.home() / ".hermetic" / "snapshots")
        return self._snapshots

    @snapshots.setter
    def snapshots(self, store: SnapshotStore) -> None:
        self._snapshots = store

    def snapshot_for(self, snapshot_id: str) -> Snapshot:
        """The snapshot, if a sandbox of this backend can start from it; NoSuchSnapshot/SnapshotError."""
        snapshot = self.snapshots.get(snapshot_id)
        if snapshot.backend != self.family:
            raise SnapshotError(
                f"snapshot {snapshot_id} was taken on the {snapshot.backend} backend; "
                f"the {self.family} backend cannot start a sandbox from it"
            )
        return snapshot

    def drop_snapshot_copy(self, snapshot: Snapshot) -> None:  # noqa: B027 (optional: local needs none)
        """Remove a snapshot's copy (volume, remote directory). Must not raise when it is already gone."""

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Remove a snapshot: its copy, then its record. Raises NoSuchSnapshot, or SnapshotError for
        another backend's snapshot."""
        try:
            snapshot = self.snapshots.get(snapshot_id)
        except NoSuchSnapshot:
            raise
        except SnapshotError:  # a damaged record: nothing readable says where a copy is
            self.snapshots.forget(snapshot_id)
            return
        if snapshot.backend != self.family:
            raise SnapshotError(
                f"snapshot {snapshot_id} belongs to the {snapshot.backend} backend; delete it there"
            )
        self.drop_snapshot_copy(snapshot)
        self.snapshots.forget(snapshot_id)

    def prune_snapshots(self, keep: int | None, max_age: float | None) -> list[str]:
        """Apply retention (newest `keep` per owner, at most `max_age` seconds old) to this backend's
        snapshots; returns the ids removed."""
        removed = []
        for snapshot in self.snapshots.expired(keep, max_age):
            if snapshot.backend == self.family:
                self.delete_snapshot(snapshot.id)
                removed.append(snapshot.id)
        return removed
