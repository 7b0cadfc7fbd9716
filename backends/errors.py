"""Errors a caller of a sandbox can meet, each with one meaning."""

from __future__ import annotations

from typing import Any


class SandboxError(Exception):
    """Base class: something about a sandbox went wrong."""


class BackendUnavailable(SandboxError):
    """The backend cannot run on this machine (no dockerd, no bubblewrap, ...); says how to fix it."""


class UnsupportedSpec(SandboxError):
    """The spec asks for something this backend cannot provide."""


class SandboxGone(SandboxError):
    """The channel to the runtime closed: the sandbox died or was removed."""


class CallTimeout(SandboxError):
    """The runtime did not answer a request in time (the sandbox itself may be fine)."""


class HandshakeError(SandboxError):
    """The runtime in the sandbox did not start or speaks another protocol."""


class RuntimeCallError(SandboxError):
    """The runtime answered a request with an error object."""

    def __init__(self, code: int, message: str, data: Any = None, method: str = "") -> None:
        super().__init__(f"{method}: {message}" if method else message)
        self.code = code
        self.message = message
        self.data = data
        self.method = method
