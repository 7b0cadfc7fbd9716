"""Settings read once from HERMETIC_* environment variables and passed down."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict

from backends import ModalConfig, SandboxSpec, SSHConfig


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="HERMETIC_", env_nested_delimiter="__", extra="ignore")

    home: Path = Path.home() / ".hermetic"
    """Where Hermetic keeps its state."""
    backend: Literal["local", "docker", "ssh", "modal"] | None = None
    """Sandbox backend; default: docker when dockerd answers, else local."""
    ssh: SSHConfig | None = None
    """Settings of the ssh backend (HERMETIC_SSH__HOST=..., HERMETIC_SSH__USER=..., ...)."""
    modal: ModalConfig | None = None
    """Settings of the modal backend (HERMETIC_MODAL__APP_NAME=..., ...)."""
    sandbox: SandboxSpec = SandboxSpec()
    """The default sandbox spec (HERMETIC_SANDBOX__MEMORY=2g, ...)."""
