"""How a sandbox is obtained: local (bubblewrap), docker, ssh, modal; all speak to the same runtime."""

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
from .modal import ModalConfig
from .network import NetworkConfig
from .spec import Mount, SandboxSpec
from .ssh import SSHConfig

BackendConfig = Annotated[LocalConfig | DockerConfig | SSHConfig | ModalConfig, Field(discriminator="type")]
BACKEND_NAMES = ("local", "docker", "ssh", "modal")


def create_backend(
    name: str, config: LocalConfig | DockerConfig | SSHConfig | ModalConfig | None = None
) -> Backend:
    """A backend by name, with `config` or else its default settings (ssh has none: it needs a host).

    Raises BackendUnavailable with the fix.
    """
    if name not in BACKEND_NAMES:
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    if config is not None:
        if config.type != name:
            raise BackendUnavailable(f"backend {name!r} was given settings for {config.type!r}")
        return config.build()
    defaults: dict[str, type[LocalConfig | DockerConfig | ModalConfig]] = {
        "local": LocalConfig,
        "docker": DockerConfig,
        "modal": ModalConfig,
    }
    if name not in defaults:
        raise BackendUnavailable(
            "the ssh backend needs a host and a user: set HERMETIC_SSH__HOST and HERMETIC_SSH__USER "
            "(and HERMETIC_SSH__KEY_FILE, ...)"
        )
    return defaults[name]().build()


__all__ = [
    "Backend",
    "BackendConfig",
    "BackendUnavailable",
    "CallTimeout",
    "DockerConfig",
    "HandshakeError",
    "ModalConfig",
    "NetworkConfig",
    "Mount",
    "RuntimeCallError",
    "Sandbox",
    "SandboxError",
    "SandboxGone",
    "SandboxSpec",
    "SSHConfig",
    "UnsupportedSpec",
    "BACKEND_NAMES",
    "create_backend",
]
