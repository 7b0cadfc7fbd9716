"""Each session's sandbox: taken from the warm pool (when `pool.size` > 0) or created from the configured
backend on first use, kept for the session, released at its end (or left running when `keep_sandbox` is
set; its ttl still applies)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from backends import Backend, BackendUnavailable, Sandbox, SandboxError, SandboxSpec, create_backend
from backends.network.proxy import configure_egress
from backends.pool import WarmPool

from .settings import Settings

log = logging.getLogger(__name__)
BROWSER_IMAGE = "hermetic-sandbox:browser"


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
        configure_egress(settings.network.connect_timeout, settings.network.idle_timeout)

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
            if self._pool is not None:
                sandbox = self._pool.acquire(base_spec(self.settings))
            else:
                sandbox = backend.create(session_spec(self.settings, session_id))
            log.info("session %s: sandbox %s on %s", session_id, sandbox.id, backend.name)
            with self._lock:
                self._sandboxes[session_id] = sandbox
            return sandbox

    def fork(self, session_id: str, child_id: str) -> Sandbox | None:
        """Give `child_id` a copy of the session's sandbox when it has one and its backend can fork
        (`Sandbox.fork`); None when not, and the child gets a fresh sandbox on first use."""
        parent = self.peek(session_id)
        fork = getattr(parent, "fork", None)
        if parent is None or fork is None:
            return None
        try:
            sandbox: Sandbox = fork()
        except SandboxError as exc:  # UnsupportedSpec on a backend without snapshots, or a failed copy
            log.info("session %s: no fork of %s (%s); a fresh sandbox instead", session_id, parent.id, exc)
            return None
        with self._lock:
            self._sandboxes[child_id] = sandbox
        return sandbox

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
