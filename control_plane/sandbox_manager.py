"""Each session's sandbox: created from the configured backend on first use, kept for the session,
released at its end (or left running when `keep_sandbox` is set; its ttl still applies)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from backends import Backend, BackendUnavailable, Sandbox, SandboxError, SandboxSpec, create_backend

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


def session_spec(settings: Settings, session_id: str) -> SandboxSpec:
    """The configured spec, labelled with the session; the browser image when browser tools are on."""
    spec = settings.sandbox
    update: dict[str, object] = {"labels": {**spec.labels, "org.hermetic.session": session_id}}
    if "browser" in settings.toolsets and spec.image == SandboxSpec.model_fields["image"].default:
        update["image"] = BROWSER_IMAGE
    return spec.model_copy(update=update)


class SandboxManager:
    def __init__(self, settings: Settings, backend: Callable[[], Backend] | None = None) -> None:
        self.settings = settings
        self._backend_factory = backend
        self._backend: Backend | None = None
        self._sandboxes: dict[str, Sandbox] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.notices: list[str] = []

    @property
    def backend(self) -> Backend:
        with self._lock:
            if self._backend is None:
                if self._backend_factory is not None:
                    self._backend = self._backend_factory()
                else:
                    self._backend, notice = choose_backend(self.settings)
                    if notice:
                        self.notices.append(notice)
            return self._backend

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
            sandbox = self.backend.create(session_spec(self.settings, session_id))
            log.info("session %s: sandbox %s on %s", session_id, sandbox.id, self.backend.name)
            with self._lock:
                self._sandboxes[session_id] = sandbox
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
        for session_id in list(self._sandboxes):
            self.release(session_id)
