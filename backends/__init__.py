"""How a sandbox is obtained: local (bubblewrap), docker; all speak to the same runtime."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import Backend, Sandbox
from .docker import DockerConfig
from .errors import (
    BackendUnavailable,
    CallTimeout,
    HandshakeError,
    RuntimeCallError,
    SandboxError,
    SandboxGone,
    UnsupportedSpec,
)
from .local import LocalConfig
from .spec import Mount, SandboxSpec

BackendConfig = Annotated[LocalConfig | DockerConfig, Field(discriminator="type")]
BACKEND_NAMES = ("local", "docker")


def create_backend(name: str) -> Backend:
    """A backend by name with its default settings. Raises BackendUnavailable with the fix."""
    configs: dict[str, type[LocalConfig] | type[DockerConfig]] = {
        "local": LocalConfig,
        "docker": DockerConfig,
    }
    if name not in configs:
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(configs)}")
    return configs[name]().build()


__all__ = [
    "Backend",
    "BackendConfig",
    "BackendUnavailable",
    "CallTimeout",
    "HandshakeError",
    "Mount",
    "RuntimeCallError",
    "Sandbox",
    "SandboxError",
    "SandboxGone",
    "SandboxSpec",
    "UnsupportedSpec",
    "BACKEND_NAMES",
    "create_backend",
]
