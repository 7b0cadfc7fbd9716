"""The other agents this one may call over A2A (the delegate_remote tool, toolset `remote`): an
allowlist of exact base URLs, each with the name of the environment variable holding its bearer token
(never the token itself: a config file is no place for a secret). `Settings.remote_agents` holds them."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class RemoteAgent(BaseModel):
    """One agent delegate_remote may call."""

    model_config = ConfigDict(extra="forbid")

    url: str
    """Its base URL (its card is at URL/.well-known/agent-card.json), e.g. http://10.0.0.5:8765; a call
    must name exactly this (a trailing / aside)."""
    token_env: str | None = None
    """The environment variable (or the profile's .env entry) holding its bearer token; none: no token."""
    description: str = Field("", max_length=500)
    """What it is for, told to the model with its URL."""

    @field_validator("url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        return base_url(value)

    @field_validator("token_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.match(value):
            raise ValueError(f"{value!r} is not an environment variable's name (the token itself goes there)")
        return value


class RemoteAgentsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agents: list[RemoteAgent] = []
    """The allowlist; empty (the default): delegate_remote refuses every URL."""
    timeout: float = Field(900.0, gt=0)
    """Seconds one delegate_remote call may take; past it the remote task is canceled."""

    def find(self, url: str) -> RemoteAgent | None:
        """The listed agent whose base URL is exactly `url` (a trailing / aside)."""
        wanted = url.rstrip("/")
        return next((agent for agent in self.agents if agent.url == wanted), None)


def base_url(value: str) -> str:
    """`value` as a base URL (http or https, a host, no query or fragment), without a trailing /.
    Raises ValueError."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise ValueError(f"{value!r} is not an http(s) base URL (scheme, host, optional port and path)")
    return value.strip().rstrip("/")
