"""What the HTTP surfaces are configured with: the API's address, the OpenAI-compatible /v1, and MCP
(the server Hermetic offers and the servers it uses). Fields of Settings (settings.py)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import NoDecode

from backends import Mount

from .env_lists import comma_list


class APISettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = 8765
    console_signin_hours: float = Field(12.0, gt=0, le=24 * 90)
    """How long a console sign-in (the cookie an API token is exchanged for) lasts; logout ends it sooner."""
    replica_address: str | None = Field(None, pattern=r"^https?://[^/\s]+$")
    """With PostgreSQL: the URL other replicas reach this `hermetic serve` at, for requests they forward
    to it (default: http://HOST:PORT it listens on; set it when listening on 0.0.0.0)."""
    lease_seconds: float = Field(6.0, ge=1, le=300)
    """With PostgreSQL: how long a replica's hold on a session lasts unrenewed (renewed every third of
    it); a killed replica's sessions are taken over this long after its last renewal."""


class OpenAISettings(BaseModel):
    """The OpenAI-compatible endpoint under /v1 of `hermetic serve` (control_plane/api/openai)."""

    model_config = ConfigDict(extra="forbid")

    model_id: str = Field("hermetic", min_length=1, max_length=256)
    """The model id /v1/models lists for this profile's agent (any model name a client sends is answered)."""
    allowed_origins: Annotated[list[str], NoDecode] = []
    """Browser origins (scheme://host:port) allowed to call /v1; any other Origin is refused."""

    @field_validator("allowed_origins", mode="before")
    @classmethod
    def _origins(cls, value: Any) -> Any:
        return comma_list(value)


class MCPSettings(BaseModel):
    """`hermetic mcp serve` (control_plane/mcp)."""

    model_config = ConfigDict(extra="forbid")

    idle_seconds: float = Field(900.0, gt=0)
    """An MCP session's sandbox unused this long is closed (the next call gets a fresh one)."""
    host: str = "127.0.0.1"
    """Where `mcp serve --http` listens."""
    port: int = Field(8766, ge=0, le=65535)


MCP_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")


class MCPServerConfig(BaseModel):
    """An MCP server the agent uses: its tools join as mcp_<server>_<tool>. A stdio server (`command`)
    runs inside a sandbox of its own unless `host` is set; an HTTP server (`url`) is reached from here."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = None
    """The program to start (stdio), e.g. python3 or npx."""
    args: list[str] = []
    env: dict[str, str] = {}
    """Variables the server gets, by value. It gets nothing else of this process's environment..."""
    env_allow: list[str] = []
    """...except these names, copied from it when set."""
    url: str | None = None
    """A streamable HTTP server's URL, instead of a command."""
    headers: dict[str, str] = {}
    """HTTP: headers sent with every request (an API key)."""
    include: list[str] = []
    """Only these tools (names as the server gives them); empty: all."""
    exclude: list[str] = []
    timeout: float = Field(60.0, gt=0)
    """Seconds for each call; past it the call fails and the server is restarted on the next one."""
    start_timeout: float = Field(60.0, gt=0)
    """Seconds for starting (a sandbox, an interpreter importing its SDK) and the protocol's handshake."""
    host: bool = False
    """Run a stdio server on this machine instead of in a sandbox (it then sees the host: a warning)."""
    mounts: list[Mount] = []
    """Host directories the server's sandbox mounts (read-only unless said), e.g. its installed code."""
    image: str | None = None
    """The image of the server's sandbox instead of sandbox.image (docker, modal), e.g.
    hermetic-sandbox:node for a server from npm (`hermetic mcp add NAME --npm PACKAGE` sets it)."""

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server has either a command (stdio) or a url (HTTP)")
        return self
