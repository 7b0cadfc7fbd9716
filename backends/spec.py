"""What a sandbox should be: one pydantic model shared by every backend."""

from __future__ import annotations

import os
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .network.credentials import Credential
from .network.policy import Denial, Policy

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)


def parse_size(value: str | int) -> int:
    """'512m', '1g', '1.5GiB' or a byte count -> bytes."""
    if isinstance(value, int):
        return value
    match = _SIZE.match(value)
    if not match:
        raise ValueError(f"not a size: {value!r} (use e.g. 512m, 2g)")
    number, unit = match.groups()
    return int(float(number) * 1024 ** "bkmgt".index(unit.lower() or "b"))


class Mount(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    """Host path (docker: host path or named volume)."""
    target: str
    """Absolute path inside the sandbox."""
    read_only: bool = True
    """Mounts are read-only unless asked otherwise."""


class SandboxSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    image: str = "hermetic-sandbox:slim"
    """Image to run (docker, modal); the local and ssh backends use the host's own system."""
    cpus: float = Field(1.0, gt=0)
    """CPU cores the sandbox may use."""
    memory: str = "1g"
    """Memory limit, e.g. 512m or 2g."""
    pids: int = Field(512, ge=16)
    """Most processes and threads at once (a browser alone needs 120-160)."""
    disk: str = "1g"
    """Size of the sandbox's scratch space (/tmp)."""
    network: Literal["none", "allowlist", "full"] = "none"
    """none: no network at all; allowlist: only the hosts in `allow`; full: unrestricted."""
    allow: list[str] = []
    """Reachable when network is 'allowlist': hosts (docs.python.org), wildcards (*.example.com: names
    under it, not itself), either with :PORT (default 80 and 443), CIDRs (203.0.113.0/24)."""
    credentials: list[Credential] = []
    """Headers the egress proxy adds to HTTPS requests for allowed hosts ({host, header, value:
    "Bearer ${VAR}"}); the value stays outside the sandbox (network: allowlist only)."""
    mounts: list[Mount] = []
    """Extra host paths to mount."""
    env: dict[str, str] = {}
    """Environment variables set in the sandbox, by value."""
    env_allow: list[str] = []
    """Names of host environment variables copied in; nothing else from the host passes."""
    labels: dict[str, str] = {}
    """Labels put on everything the backend creates."""
    ttl: int | None = Field(None, gt=0)
    """Seconds after which the sandbox is destroyed even if nobody closes it."""
    workdir: str = "/workspace"
    """The writable workspace and the shells' starting directory."""
    workspace: str | None = None
    """Host directory to use as the workspace (local, docker: bind-mounted, left in place on close; ssh: a
    path on the remote host); default: a fresh one."""
    output_limit: int = Field(50_000, ge=200)
    """Characters of command output the model sees before head+tail truncation."""
    from_snapshot: str | None = None
    """Start from this snapshot (an id from Sandbox.snapshot): its workspace and shell sessions."""
    privileges: Literal["sealed", "task"] = "sealed"
    """sealed: an unprivileged user, no capabilities, a read-only root. task: what an evaluation task's
    image expects (Terminal-Bench): the image's own user (root unless its Dockerfile says otherwise),
    Docker's default capabilities and a writable root; no-new-privileges, the limits and the network
    policy stay, and host mounts are refused. Docker only."""
    own_root: bool = False
    """ssh: run the runtime in bubblewrap on the host (bwrap needed there) with a root of its own: the
    host's top-level directories bound as they are, the workspace at `workdir`, a private /tmp and /proc,
    no network with `network: none`; so an evaluation task can make its /tests and /logs at the root.
    The local backend's sandboxes have their own root always, docker's with privileges: task."""

    @field_validator("allow")
    @classmethod
    def _valid_rules(cls, value: list[str]) -> list[str]:
        Policy(value)  # PolicyError (a ValueError) names the bad rule
        return value

    @model_validator(mode="after")
    def _credentials_for_allowed_hosts(self) -> SandboxSpec:
        if self.credentials and self.network != "allowlist":
            raise ValueError("credentials are added by the egress proxy: they need network: allowlist")
        policy = Policy(self.allow)
        for credential in self.credentials:
            if isinstance(policy.check(credential.host, 443), Denial):
                raise ValueError(
                    f"a credential for {credential.host}, which sandbox.allow does not allow on port 443"
                )
        return self

    @field_validator("memory", "disk")
    @classmethod
    def _valid_size(cls, value: str) -> str:
        parse_size(value)
        return value

    def given_env(self) -> dict[str, str]:
        """What the sandbox's environment starts from, on every backend: the host variables named in
        `env_allow` that are set here, then `env` (which wins)."""
        return {**{k: os.environ[k] for k in self.env_allow if k in os.environ}, **self.env}

    @property
    def memory_bytes(self) -> int:
        return parse_size(self.memory)

    @property
    def disk_bytes(self) -> int:
        return parse_size(self.disk)
