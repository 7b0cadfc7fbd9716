"""Each session's sandbox: taken from the warm pool (when `pool.size` > 0) or created from the configured
backend on first use, kept for the session, released at its end (or left running when `keep_sandbox` is
set; its ttl still applies). At most `limits.max_sandboxes` at once; one unused for `sandbox.idle_seconds`
is closed, and the session's next use starts a fresh one with a notice saying what was lost. A session
can be told to start its next sandbox from a snapshot (a rollback or a fork of a session whose sandbox is
gone); that wish is kept on disk, so another process honours it."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from backends import (
    Backend,
    BackendUnavailable,
    LocalConfig,
    Sandbox,
    SandboxError,
    SandboxSpec,
    create_backend,
)
from backends.network.proxy import configure_egress
from backends.pool import WarmPool, Warmup
from backends.snapshots import SnapshotError, SnapshotStore

from .config.settings import Settings
from .warm_browser import browser_warmup

log = logging.getLogger(__name__)
BROWSER_IMAGE = "hermetic-sandbox:browser"
IDLE_NOTICE = (
    "the sandbox was closed after {seconds:g} s unused and a fresh one started: "
    "its workspace files, shell sessions and background processes are gone"
)


class SandboxLimit(SandboxError):
    """Another sandbox would exceed the profile's limits.max_sandboxes."""


SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def choose_backend(settings: Settings, name: str | None = None) -> tuple[Backend, str | None]:
    """The named backend, else the configured one, else docker when dockerd answers and local otherwise.

    Returns the backend and a notice when it fell back. Raises BackendUnavailable with the fix.
    """
    name = name or settings.backend
    local = LocalConfig(state_dir=settings.sandbox.root or settings.root / "sandboxes")
    if name:
        return create_backend(
            name,
            {"docker": settings.docker, "ssh": settings.ssh, "modal": settings.modal, "local": local}.get(
                name
            ),
        ), None
    try:
        return create_backend("docker", settings.docker), None
    except BackendUnavailable as exc:
        return create_backend("local", local), f"docker unavailable ({exc}); using the local backend"


def snapshot_store(settings: Settings) -> SnapshotStore:
    """The profile's snapshot registry: its home's snapshots/ directory."""
    return SnapshotStore(settings.home / "snapshots")


def base_spec(settings: Settings) -> SandboxSpec:
    """The configured spec; the browser image when browser tools are on. What the pool warms: a warm
    sandbox cannot carry its future session's label (docker fixes labels at create)."""
    spec = settings.sandbox.spec
    if "browser" in settings.toolsets and spec.image == SandboxSpec.model_fields["image"].default:
        return spec.model_copy(update={"image": BROWSER_IMAGE})
    return spec


def warmup(settings: Settings) -> Warmup | None:
    """What the session pool starts in its sandboxes beyond the shell: the browser, when its toolset is on
    and `pool.warm_browser` allows."""
    if "browser" in settings.toolsets and settings.pool.warm_browser:
        return browser_warmup(base_spec(settings))
    return None


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
        self._throwaways: WarmPool | None = None
        self._sandboxes: dict[str, Sandbox] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # wakes the idle reaper
        self._last_used: dict[str, float] = {}
        self._busy: dict[str, int] = {}
        self._idle_closed: set[str] = set()  # sessions whose next sandbox gets the notice
        self._session_notices: dict[str, list[str]] = {}
        self._workspaces: dict[str, str] = {}
        """Host directories some sessions use as their workspace (an editor's project, `hermetic acp`)."""
        self._reaper: threading.Thread | None = None
        self._closing = False
        self.notices: list[str] = []
        configure_egress(settings.network.connect_timeout, settings.network.idle_timeout)
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
                    self._pool = WarmPool(self._backend, pool.size, pool.idle_seconds, warmup(self.settings))
                    self._pool.prefill(base_spec(self.settings))
            return self._backend

    @property
    def throwaways(self) -> WarmPool | None:
        """The skill gate's warm pool on the same backend (`skills.warm_sandboxes` per spec; None when 0):
        each of its sandboxes checks one skill and is closed. Built on first use; it warms a spec once
        the gate has asked for it."""
        skills = self.settings.skills
        if not skills.warm_sandboxes:
            return None
        backend = self.backend
        with self._lock:
            if self._throwaways is None and not self._closing:
                self._throwaways = WarmPool(backend, skills.warm_sandboxes, skills.warm_seconds)
            return self._throwaways

    def use_workspace(self, session_id: str, directory: str) -> None:
        """Give the session's next sandbox this host directory as its workspace, mounted read-write
        (local: bind-mounted by bubblewrap; docker: a bind mount, dockerd on this machine only). The
        directory is the user's: closing the sandbox leaves it in place."""
        with self._lock:
            self._workspaces[session_id] = directory

    def prefill(self) -> None:
        """Build the backend now, so the warm pool (when configured) is ready before the first session."""
        _ = self.backend

    def get(self, session_id: str) -> Sandbox:
        """The session's sandbox, created on first use (concurrent first uses create one).

        Raises SandboxLimit when the profile already holds limits.max_sandboxes, else the backend's errors.
        """
        with self._lock:
            sandbox = self._sandboxes.get(session_id)
            if sandbox is not None:
                self._last_used[session_id] = time.monotonic()
                return sandbox
            lock = self._locks.setdefault(session_id, threading.Lock())
        with lock:
            with self._lock:
                if session_id in self._sandboxes:
                    self._last_used[session_id] = time.monotonic()
                    return self._sandboxes[session_id]
                self._admit()
            backend = self.backend
            sandbox, notice = self._from_pending(session_id)
            workspace = self._workspaces.get(session_id)
            if sandbox is None and workspace is not None:  # its own directory: never a warm sandbox
                spec = session_spec(self.settings, session_id).model_copy(update={"workspace": workspace})
                sandbox = backend.create(spec)
            elif sandbox is None and self._pool is not None:
                sandbox = self._pool.acquire(base_spec(self.settings))
            elif sandbox is None:
                sandbox = backend.create(session_spec(self.settings, session_id))
            if notice:  # per sandbox: the manager's own notices go to whichever session calls next
                sandbox.notices.append(notice)
            log.info("session %s: sandbox %s on %s", session_id, sandbox.id, backend.name)
            self._prepare(sandbox)
            with self._lock:
                self._sandboxes[session_id] = sandbox
                self._last_used[session_id] = time.monotonic()
                if session_id in self._idle_closed:
                    self._idle_closed.discard(session_id)
                    notice = IDLE_NOTICE.format(seconds=self.settings.sandbox.idle_seconds)
                    self._session_notices.setdefault(session_id, []).append(notice)
                self._start_reaper()
                self._changed.notify_all()
            return sandbox

    def prepare(self, session_id: str) -> None:
        """The session's sandbox (if it has one) gets ready for its next checkpoint: when it joins the
        session, and when a turn is over."""
        sandbox = self.peek(session_id)
        if sandbox is not None:
            self._prepare(sandbox)

    def _prepare(self, sandbox: Sandbox) -> None:
        if self.settings.snapshots.checkpoints:
            sandbox.prepare_snapshots()  # docker: a copy helper made ahead

    def _admit(self) -> None:
        """Called under the lock before a sandbox is added for a session that holds none."""
        limit = self.settings.limits.max_sandboxes
        if len(self._sandboxes) >= limit:
            raise SandboxLimit(
                f"this profile already holds {limit} sandboxes (limits.max_sandboxes); "
                "close a session or raise the limit"
            )

    def admit(self, session_id: str | None = None) -> None:
        """Raise SandboxLimit when the session (None: one not yet created) holds no sandbox and another
        would exceed the limit: the check before a sandbox is made by other means than get (a fork's)."""
        with self._lock:
            if session_id not in self._sandboxes:
                self._admit()

    def fork(self, session_id: str, child_id: str) -> Sandbox | None:
        """Give `child_id` a copy of the session's sandbox when it has one and its backend can fork
        (`Sandbox.fork`); None when not, and the child gets a fresh sandbox on first use."""
        parent = self.peek(session_id)
        fork = getattr(parent, "fork", None)
        if parent is None or fork is None:
            return None
        try:
            self.admit(child_id)
            sandbox: Sandbox = fork()
        except SandboxError as exc:  # UnsupportedSpec on a backend without snapshots, or a failed copy
            log.info("session %s: no fork of %s (%s); a fresh sandbox instead", session_id, parent.id, exc)
            return None
        self._prepare(sandbox)
        with self._lock:
            self._sandboxes[child_id] = sandbox
            self._last_used[child_id] = time.monotonic()  # idle-closed like any session's sandbox
            self._start_reaper()
        return sandbox

    @contextlib.contextmanager
    def using(self, session_id: str) -> Iterator[None]:
        """Around a tool call: the session's sandbox is not idle while it runs, however long."""
        with self._lock:
            self._busy[session_id] = self._busy.get(session_id, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._busy[session_id] -= 1
                if not self._busy[session_id]:
                    del self._busy[session_id]
                if session_id in self._sandboxes:
                    self._last_used[session_id] = time.monotonic()
                self._changed.notify_all()

    def held(self) -> set[str]:
        """The sessions holding a sandbox now."""
        with self._lock:
            return set(self._sandboxes)

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
        self._prepare(sandbox)
        with self._lock:
            old = self._sandboxes.get(session_id)
            self._sandboxes[session_id] = sandbox
            self._last_used[session_id] = time.monotonic()
            self._start_reaper()
        if old is not None and old is not sandbox:
            try:
                old.close()
            except SandboxError as exc:
                log.warning("session %s: closing sandbox %s failed: %s", session_id, old.id, exc)

    def detach(self, session_id: str) -> Sandbox | None:
        """Forget the session's sandbox without closing it: whoever gave it (`replace`) still uses it."""
        with self._lock:
            return self._take(session_id)

    def pop_notices(self, session_id: str | None = None) -> list[str]:
        """What the backend said (a fallback), and what happened to this session's sandbox (an idle close)."""
        with self._lock:
            notices, self.notices = self.notices, []
            if session_id is not None:
                notices += self._session_notices.pop(session_id, [])
        return notices

    def holding(self) -> dict[str, Sandbox]:
        """The sandboxes held now, by the session holding each."""
        with self._lock:
            return dict(self._sandboxes)

    def peek(self, session_id: str) -> Sandbox | None:
        with self._lock:
            return self._sandboxes.get(session_id)

    def interrupt(self, session_id: str) -> None:
        """Stop what the session's shell and its execute_code scripts run (the agent was interrupted)."""
        sandbox = self.peek(session_id)
        if sandbox is not None:
            try:
                sandbox.runtime.shell_interrupt(session="default", call_timeout=10)
                sandbox.runtime.script_cancel(call_timeout=10)
            except SandboxError as exc:
                log.warning("session %s: interrupt failed: %s", session_id, exc)

    def release(self, session_id: str) -> None:
        with self._lock:
            sandbox = self._take(session_id)
            self._locks.pop(session_id, None)
            self._idle_closed.discard(session_id)
            self._session_notices.pop(session_id, None)
        if sandbox is None:
            return
        if self.settings.keep_sandbox:
            log.info("session %s: keeping sandbox %s (keep_sandbox)", session_id, sandbox.id)
            return
        _close(session_id, sandbox)

    def close_all(self) -> None:
        """Release every session's sandbox and destroy the warm ones (later sessions create their own)."""
        with self._lock:
            self._closing = True
            self._changed.notify_all()
        for session_id in list(self._sandboxes):
            self.release(session_id)
        for pool in (self._pool, self._throwaways):
            if pool is not None:
                pool.close()
        if self._reaper is not None:
            self._reaper.join(30)

    # -- the idle reaper: one thread per manager, asleep until the next sandbox could become idle ----

    def _take(self, session_id: str) -> Sandbox | None:
        """Forget the session's sandbox (under the lock); the caller closes it."""
        self._last_used.pop(session_id, None)
        return self._sandboxes.pop(session_id, None)

    def _start_reaper(self) -> None:
        if self._reaper is None and self.settings.sandbox.idle_seconds is not None:
            self._reaper = threading.Thread(target=self._reap_idle, name="sandbox-idle", daemon=True)
            self._reaper.start()

    def _reap_idle(self) -> None:
        idle = self.settings.sandbox.idle_seconds
        assert idle is not None
        while True:
            with self._lock:
                while not self._closing:
                    now = time.monotonic()
                    waiting = {s: t + idle - now for s, t in self._last_used.items() if s not in self._busy}
                    due = [s for s, left in waiting.items() if left <= 0]
                    if due:
                        break
                    self._changed.wait(min(waiting.values(), default=None))
                if self._closing:
                    return
                closed = [(s, self._take(s)) for s in due]
                self._idle_closed.update(due)
            for session_id, sandbox in closed:
                if sandbox is not None:
                    log.info(
                        "session %s: sandbox %s unused for %g s; closing it", session_id, sandbox.id, idle
                    )
                    _close(session_id, sandbox)


def _close(session_id: str, sandbox: Sandbox) -> None:
    try:
        sandbox.close()
    except SandboxError as exc:
        log.warning("session %s: closing sandbox %s failed: %s", session_id, sandbox.id, exc)
