"""What every chat platform's settings share: who may talk (ChatAccess), and `${NAME}` secrets read from
the environment. At the bottom of the gateway's settings, so each platform's module can build on it."""

from __future__ import annotations

import os
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def from_env(value: Any) -> Any:
    """`${NAME}` in a config value is the environment variable NAME (secrets stay out of config.yaml)."""
    if not isinstance(value, str):
        return value

    def look_up(match: re.Match[str]) -> str:
        if match.group(1) not in os.environ:
            raise ValueError(f"the environment variable {match.group(1)} is not set")
        return os.environ[match.group(1)]

    return _ENV_REF.sub(look_up, value)


class ChatAccess(BaseModel):
    """Who may talk to the agent on one platform: deny by default (control_plane/gateway/access.py)."""

    model_config = ConfigDict(extra="forbid")

    allow_users: list[str] = []
    """Platform user ids always admitted (more are admitted by `hermetic gateway pair CODE`)."""
    allow_chats: list[str] = []
    """Group chats (channels) the agent answers in; none unless listed."""
    pairing: bool = True
    """An unknown user in a direct chat gets a one-time code the owner admits with `gateway pair`."""
    session_per_user_in_groups: bool = False
    """In a group chat, one session per user instead of one per chat."""
    progress: Literal["off", "new", "all"] = "all"
    """Tool calls as progress lines: none, only when the tool changes, or every call."""
    edit_interval: float = Field(1.0, gt=0)
    """Seconds between edits of a streaming reply (the platform's rate limit)."""
    max_file_bytes: int = Field(20_000_000, ge=1)
    """The largest file a user may send: a larger one is not downloaded, and the user is told."""
