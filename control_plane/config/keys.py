"""The profile's keys: one private `.env` in the profile home (mode 0600), read at start beneath the
environment (a variable already set wins), never copied into config.yaml, logs, the database or a sandbox.

The values it holds are also secrets the redactor knows, so a key that shows up in tool output is
masked before the model or the database sees it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dotenv import dotenv_values, set_key, unset_key

ENV_FILE = ".env"


class KeyFileError(RuntimeError):
    """The .env file cannot be used as it is (readable by others, unreadable); the message says the fix."""


def env_path(home: Path) -> Path:
    return home / ENV_FILE


def read_env_file(home: Path) -> dict[str, str]:
    """The file's variables (empty when there is none). Refuses a file that others may read, as ssh
    refuses such a private key: the fix is one chmod, and a key is never used from a leaky file."""
    path = env_path(home)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return {}
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyFileError(
            f"{path} is readable by other users (mode {stat.S_IMODE(mode):o}); "
            f"it holds keys: chmod 600 {path}"
        )
    try:
        values = dotenv_values(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise KeyFileError(f"{path} cannot be read: {exc}") from exc
    return {name: value for name, value in values.items() if value is not None}


def load_env_file(home: Path) -> dict[str, str]:
    """Put the file's variables into the environment where they are not set yet; returns the file's."""
    values = read_env_file(home)
    for name, value in values.items():
        os.environ.setdefault(name, value)
    return values


def write_key(home: Path, name: str, value: str) -> Path:
    """Set one variable in the profile's .env, creating it private (0600) first."""
    path = env_path(home)
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
    os.chmod(path, 0o600)
    set_key(str(path), name, value, quote_mode="always")
    os.chmod(path, 0o600)  # python-dotenv rewrites through a temp file: keep the mode whatever it did
    return path


def remove_key(home: Path, name: str) -> bool:
    path = env_path(home)
    if not path.exists():
        return False
    removed, _ = unset_key(str(path), name)
    return bool(removed)
