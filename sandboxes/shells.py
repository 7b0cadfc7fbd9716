"""The runtime's named shell sessions."""

from __future__ import annotations

import threading

from .protocol import NO_SUCH_SESSION, RpcError
from .shell import ShellSession


class ShellManager:
    """The runtime's shell sessions by name; `run` opens a missing session on first use."""

    def __init__(self, workspace: str, env: dict[str, str]) -> None:
        self._workspace = workspace
        self._env = env
        self._sessions: dict[str, ShellSession] = {}
        self._lock = threading.Lock()

    def open(self, name: str, cwd: str | None = None, env: dict[str, str] | None = None) -> ShellSession:
        with self._lock:
            session = self._sessions.get(name)
            if session is None:
                merged = dict(self._env)
                merged.update(env or {})
                session = ShellSession(name, cwd or self._workspace, merged)
                self._sessions[name] = session
            return session

    def get(self, name: str) -> ShellSession:
        session = self._sessions.get(name)
        if session is None:
            raise RpcError(NO_SUCH_SESSION, "no shell session named %r" % name)
        return session

    def close(self, name: str) -> bool:
        with self._lock:
            session = self._sessions.pop(name, None)
        if session is None:
            return False
        session.close()
        return True

    def names(self) -> list:
        return sorted(self._sessions)

    def close_all(self) -> None:
        for name in list(self._sessions):
            self.close(name)
