"""The runtime's named shell sessions, and their state for a snapshot: each idle session's working
directory and exported variables (never its processes)."""

from __future__ import annotations

import os
import threading
from typing import Any

from .protocol import INVALID_PARAMS, NO_SUCH_SESSION, RpcError
from .shell import ShellSession

# What bash sets for itself or the runtime uses: not part of a session's state.
_NOT_STATE = {"_", "PWD", "OLDPWD", "SHLVL"}


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

    # -- state for snapshots -----------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Each idle session's cwd and exported variables; a session running a command is listed
        in `skipped` (its state cannot be read without waiting for the command)."""
        sessions: dict[str, Any] = {}
        skipped: dict[str, str] = {}
        for name in self.names():
            session = self._sessions.get(name)
            if session is None:
                continue
            captured = session.capture()
            if captured is None:
                skipped[name] = "running a command"
                continue
            cwd, env = captured
            sessions[name] = {"cwd": cwd, "env": {k: v for k, v in env.items() if k not in _NOT_STATE}}
        return {"workspace": self._workspace, "sessions": sessions, "skipped": skipped}

    def restore(self, state: dict[str, Any]) -> list:
        """Open each session of `state` with exactly its cwd and variables (replacing a session of
        the same name). Paths under the snapshot's workspace are moved to this one's, which differs
        on SSH."""
        try:
            old = str(state.get("workspace") or self._workspace)
            sessions = dict(state["sessions"])
        except (KeyError, TypeError, ValueError) as exc:
            raise RpcError(INVALID_PARAMS, "not a shell state: %s" % exc) from exc

        def moved(value: str) -> str:
            if value == old or value.startswith(old.rstrip("/") + "/"):
                return self._workspace + value[len(old) :]
            return value

        restored = []
        for name, saved in sorted(sessions.items()):
            cwd = moved(str(saved.get("cwd") or self._workspace))
            env = {str(k): moved(str(v)) for k, v in dict(saved.get("env") or {}).items()}
            self.close(name)
            with self._lock:
                self._sessions[name] = ShellSession(name, cwd if os.path.isdir(cwd) else self._workspace, env)
            restored.append(name)
        return restored
