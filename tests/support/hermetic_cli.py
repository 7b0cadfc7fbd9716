"""`hermetic` as a user runs it: a subprocess of this Python, with an environment the test builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from backends import Backend
from backends.ssh import SSHBackend


def hermetic(
    *args: str, env: Mapping[str, str], stdin: str | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """`hermetic ARGS`, its output captured as text; `stdin` is piped in when given."""
    return subprocess.run(
        [sys.executable, "-m", "control_plane", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(env),
    )


def scripted_env(root: Path, model_url: str, **extra: str) -> dict[str, str]:
    """This process's environment without its HERMETIC_* settings: home `root`, the scripted model at
    `model_url` (no retries), the local backend and a wide terminal; `extra` adds or overrides."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    return {
        **clean,
        "HERMETIC_ROOT": str(root),
        "HERMETIC_MODEL__NAME": "openai/scripted",
        "HERMETIC_MODEL__API_BASE": model_url,
        "HERMETIC_MODEL__API_KEY": "test-key-abcdef",
        "HERMETIC_MODEL__RETRIES": "0",
        "HERMETIC_BACKEND": "local",
        "COLUMNS": "200",
        **extra,
    }


def ssh_env(backend: Backend | None) -> dict[str, str]:
    """Where the ssh backend connects, as HERMETIC_SSH__* settings (none for another backend)."""
    if not isinstance(backend, SSHBackend):
        return {}
    return {
        f"HERMETIC_SSH__{key.upper()}": json.dumps(value) if isinstance(value, list) else str(value)
        for key, value in backend.config.model_dump(mode="json", exclude_none=True).items()
    }
