"""Each session's sandbox: taken from the warm pool (when `pool.size` > 0) or created from the configured
backend on first use, kept for the session, released at its end (or left running when `keep_sandbox` is
set; its ttl still applies). A session can be told to start its next sandbox from a snapshot (a rollback
or a fork of a session whose sandbox is gone); that wish is kept on disk, so another process honours it."""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from backends import Backend, BackendUnavailable, Sandbox, SandboxError, SandboxSpec, create_backend
from backends.pool import WarmPool
from backends.snapshots import SnapshotError, SnapshotStore

from .settings import Settings

log = logging.getLogger(__name__)
BROWSER_IMAGE = "hermetic-sandbox:browser"
SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def choose_backend(settings: Settings, name: str | None = None) -> tuple[Backend, str | None]:
    """The named backend, else the configured one, else docker when dockerd answers and local otherwise.

    Returns the backend and a notice when it fell back. Raises BackendUnavailable with the fix.
    """
    name = name or settings.backend
    if name:
        return create_backend(name, {"ssh": settings.ssh, "modal": settings.modal}.get(name)), None
    try:
        return create_backend("docker"), None
    except BackendUnavailable as exc:
        return create_backend("local"), f"docker unavailable ({exc}); using the local backend"


def snapshot_store(settings: Settings) -> SnapshotStore:
    """The profile's snapshot registry: its home's snapshots/ directory."""
    return SnapshotStore(settings.home / "snapshots")


def base_spec(settings: Settings) -> SandboxSpec:
    """The configured spec; the browser image when browser tools are on. What the pool warms: a warm
    sandbox cannot carry its future session's label (docker fixes labels at create)."""
    spec = settings.sandbox
    if "browser" in settings.toolsets and spec.image == SandboxSpec.model_fields["image"].default:
        return spec.model_copy(update={"image": BROWSER_IMAGE})
    return spec


def session_spec(settings: Settings, session_id: str) -> SandboxSpec:
    """The base spec labelled with the session (when there is no pool)."""
    spec = base_spec(settings)
    return spec.model_copy(update={"labels": {**spec.labels, "org.hermetic.session": session_id}})


class SandboxManager:
    def __init__(self, settings: Settings, backend: Callable[[], Backend] | None = None) -> None:
        self.settings = settings
        self._backend_factory = backend
        self._backend: Backend | None = None
        self._pool: WarmPool | None = None
        self._sandboxes: dict[str, Sandbox] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.notices: list[str] = []
        self.snapshots = snapshot_store(settings)
        """This profile's snapshot registry (the backend is given it when built)."""

    @property
    def backend(self) -> Backend:
        """The backend, built on first use; the warm pool (when configured) starts filling then."""
        with self._lock:
            if self._backend is None:
                if self._backend_factory is not None:
                    self._backend = self._backend_factory()
                else:
                    self._backend, notice = choose_backend(self.settings)
                    if notice:
                        self.notices.append(notice)
                self._backend.snapshots = self.snapshots
                self.reap_snapshots()
                pool = self.settings.pool
                if pool.size:
                    self._pool = WarmPool(self._backend, pool.size, pool.idle_seconds)
                    self._pool.prefill(base_spec(self.settings))
            return self._backend

    def prefill(self) -> None:
        """Build the backend now, so the warm pool (when configured) is ready before the first session."""
        _ = self.backend

    def get(self, session_id: str) -> Sandbox:
        """The session's sandbox, created on first use (concurrent first uses create one)."""
        with self._lock:
            sandbox = self._sandboxes.get(session_id)
            if sandbox is not None:
                return sandbox
            lock = self._locks.setdefault(session_id, threading.Lock())
        with lock:
            with self._lock:
                if session_id in self._sandboxes:
                    return self._sandboxes[session_id]
            backend = self.backend
            sandbox, notice = self._from_pending(session_id)
            if sandbox is None and self._pool is not None:
                sandbox = self._pool.acquire(base_spec(self.settings))
            elif sandbox is None:
                sandbox = backend.create(session_spec(self.settings, session_id))
            if notice:  # per sandbox: the manager's own notices go to whichever session calls next
                sandbox.notices.append(notice)
            log.info("session %s: sandbox %s on %s", session_id, sandbox.id, backend.name)
            with self._lock:
                self._sandboxes[session_id] = sandbox
            return sandbox

    # -- snapshots --------------------------------------------------------------------------

    def _pending_path(self, session_id: str) -> Path:
        if not SESSION_ID.match(session_id):
            raise ValueError(f"not a session id: {session_id!r}")
        return self.snapshots.root / "pending" / f"{session_id}.json"

    def reap_snapshots(self) -> list[str]:
        """Apply the profile's retention to its snapshots on this backend (when `snapshots.reap`), and
        remove copies on this host that a control plane dying mid-copy left without a record."""
        rules = self.settings.snapshots
        if not rules.reap or self._backend is None:
            return []
        for leftover in self.snapshots.leftovers():
            log.info("removing %s: a snapshot copy without a record", leftover)
            shutil.rmtree(leftover, ignore_errors=True)
        try:
            return self._backend.prune_snapshots(rules.keep, rules.max_age)
        except SandboxError as exc:
            log.warning("snapshot retention failed: %s", exc)
            return []

    def start_next_from(self, session_id: str, snapshot_id: str, notice: str) -> None:
        """The session's next sandbox starts from this snapshot, and the agent is told `notice` then."""
        path = self._pending_path(session_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"snapshot": snapshot_id, "notice": notice}))

    def _from_pending(self, session_id: str) -> tuple[Sandbox | None, str | None]:
        """The session's sandbox from the snapshot it was told to start from (never pooled: it is made
        for this session) and what to tell the agent; (None, why) when that snapshot is gone, (None,
        None) when there was no such wish. The wish is used up either way."""
        pending = self._pending_start(session_id)
        if pending is None:
            return None, None
        snapshot_id, notice = pending
        self._pending_path(session_id).unlink(missing_ok=True)
        spec = session_spec(self.settings, session_id).model_copy(update={"from_snapshot": snapshot_id})
        try:
            return self.backend.create(spec), notice
        except SnapshotError as exc:
            log.warning("session %s: not started from snapshot %s: %s", session_id, snapshot_id, exc)
            return None, f"the sandbox could not be restored as asked ({exc}); it starts fresh"

    def _pending_start(self, session_id: str) -> tuple[str, str] | None:
        try:
            pending = json.loads(self._pending_path(session_id).read_text())
            return str(pending["snapshot"]), str(pending["notice"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def replace(self, session_id: str, sandbox: Sandbox, notice: str | None = None) -> None:
        """Give the session this sandbox (a rollback's, a fork's); its previous one is closed. `notice`
        is told to the agent with its next tool result."""
        if notice:
            sandbox.notices.append(notice)
        with self._lock:
            old = self._sandboxes.get(session_id)
            self._sandboxes[session_id] = sandbox
        if old is not None and old is not sandbox:
            try:
                old.close()
            except SandboxError as exc:
                log.warning("session %s: closing sandbox %s failed: %s", session_id, old.id, exc)

    def pop_notices(self) -> list[str]:
        with self._lock:
            notices, self.notices = self.notices, []
        return notices

    def peek(self, session_id: str) -> Sandbox | None:
        with self._lock:
            return self._sandboxes.get(session_id)

    def interrupt(self, session_id: str) -> None:
        """Stop what the session's shell is running (the agent was interrupted)."""
        sandbox = self.peek(session_id)
        if sandbox is not None:
            try:
                sandbox.call("shell.interrupt", {"session": "default"}, timeout=10)
            except SandboxError as exc:
                log.warning("session %s: interrupt failed: %s", session_id, exc)

    def release(self, session_id: str) -> None:
        with self._lock:
            sandbox = self._sandboxes.pop(session_id, None)
            self._locks.pop(session_id, None)
        if sandbox is None:
            return
        if self.settings.keep_sandbox:
            log.info("session %s: keeping sandbox %s (keep_sandbox)", session_id, sandbox.id)
            return
        try:
            sandbox.close()
        except SandboxError as exc:
            log.warning("session %s: closing sandbox %s failed: %s", session_id, sandbox.id, exc)

    def close_all(self) -> None:
        """Release every session's sandbox and destroy the warm ones (later sessions create their own)."""
        for session_id in list(self._sandboxes):
            self.release(session_id)
        if self._pool is not None:
            self._pool.close()
