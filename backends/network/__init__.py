"""A sandbox's network doors: the egress allowlist (policy), the proxy that enforces it, exposed ports.

Backends call `Egress.attach` for a sandbox on `network: allowlist`, bind-mount its socket directory at
SANDBOX_NET_DIR and put `Egress.env` in the sandbox's environment; the sandbox's own network stays
`none`. Nothing here imports the control plane.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .credentials import PLACEHOLDER, Credential
from .expose import SANDBOX_INGRESS_DIR, ExposeError, Exposure, Ingress, exposures
from .policy import Policy, PolicyError
from .proxy import CA_NAME, SOCKET_NAME, egress_proxy


class NetworkConfig(BaseModel):
    """The sandbox's network doors (the settings' `network:`): the egress proxy and exposed ports. Which
    hosts a sandbox reaches is `sandbox.network: allowlist` with `sandbox.allow` (hosts, *.wildcards,
    :PORT, CIDRs, @python/@node/@github/@debian presets)."""

    model_config = ConfigDict(extra="forbid")

    connect_timeout: float = Field(10.0, gt=0)
    """Seconds the egress proxy waits to resolve and connect to an upstream."""
    idle_timeout: float = Field(300.0, gt=0)
    """Seconds a proxied connection may carry nothing either way before it is closed."""
    expose_bind: str = "127.0.0.1"
    """Host address exposed ports listen on (loopback only by default; 0.0.0.0 for every interface)."""


NET_ROOT = Path.home() / ".hermetic" / "net"
"""Per sandbox: `<id>/sock/` (mounted into the sandbox) and `<id>/egress.jsonl` (the audit log)."""
SANDBOX_NET_DIR = "/run/hermetic"
SYSTEM_CA_FILE = "/etc/ssl/certs/ca-certificates.crt"
"""Debian's (and OpenSSL's default) CA file: with credentials, a bundle adding the sandbox CA is bound
read-only over it, for programs that ignore the CA variables."""
TRUST_STORE_NAME = "ca-certificates.crt"


def net_dir(sandbox_id: str, root: Path = NET_ROOT) -> Path:
    """A sandbox's directory of doors: sock/ (egress), in/ (ingress), exposed/, egress.jsonl."""
    return root / sandbox_id


def open_ingress(sandbox_id: str, root: Path = NET_ROOT) -> Ingress:
    """The sandbox's ingress directory, created (mount it at SANDBOX_INGRESS_DIR, read-write)."""
    return Ingress(sandbox_id, net_dir(sandbox_id, root)).create()


def forget(sandbox_id: str, root: Path = NET_ROOT) -> None:
    """Remove the doors of a sandbox another (dead) process created; its audit log stays."""
    directory = net_dir(sandbox_id, root)
    for part in ("sock", "in", "exposed"):
        shutil.rmtree(directory / part, ignore_errors=True)
    with contextlib.suppress(OSError):
        directory.rmdir()


def audit_path(sandbox_id: str, root: Path = NET_ROOT) -> Path:
    return root / sandbox_id / "egress.jsonl"


def read_audit(sandbox_id: str, root: Path = NET_ROOT) -> list[dict[str, Any]]:
    """A sandbox's egress decisions, oldest first (empty when it never used the network)."""
    path = audit_path(sandbox_id, root)
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):  # the line the proxy is appending right now
            entries.append(json.loads(line))
    return entries


@dataclass
class Egress:
    """A sandbox's attachment to the process's egress proxy."""

    sandbox_id: str
    socket_dir: Path
    audit: Path
    credentials: tuple[Credential, ...] = ()

    @classmethod
    def attach(
        cls,
        sandbox_id: str,
        rules: list[str],
        credentials: list[Credential] | None = None,
        root: Path = NET_ROOT,
    ) -> Egress:
        """Serve the sandbox on `root/<id>/sock/egress.sock` under `rules`, adding `credentials` to the
        requests for their hosts. Raises PolicyError (a bad rule, a credential's variable unset)."""
        found = tuple(credentials or ())
        for credential in found:
            credential.resolve()  # every variable set now, or the sandbox is not made
        egress = cls(sandbox_id, root / sandbox_id / "sock", audit_path(sandbox_id, root), found)
        egress_proxy().attach(sandbox_id, egress.socket_dir, Policy(rules), egress.audit, found)
        return egress

    @property
    def env(self) -> dict[str, str]:
        """What the runtime needs to start its loopback bridge (it sets the proxy variables itself), the
        CA it trusts for the credentials' hosts, and a placeholder in each credential's variable."""
        env = {"HERMETIC_EGRESS_SOCKET": f"{SANDBOX_NET_DIR}/{SOCKET_NAME}"}
        if self.credentials:
            env["HERMETIC_EGRESS_CA"] = f"{SANDBOX_NET_DIR}/{CA_NAME}"
        for credential in self.credentials:
            env.update(dict.fromkeys(credential.variables, PLACEHOLDER))
        return env

    def trust_store(self, system: bytes) -> Path | None:
        """With credentials, `system` (the sandbox's own CA file) plus the sandbox CA, written in the
        socket directory for the backend to bind read-only at SYSTEM_CA_FILE; None without credentials."""
        if not self.credentials:
            return None
        bundle = self.socket_dir / TRUST_STORE_NAME
        ca = (self.socket_dir / CA_NAME).read_bytes()
        bundle.write_bytes(system.rstrip(b"\n") + b"\n" + ca if system.strip() else ca)
        bundle.chmod(0o644)
        return bundle

    def allow(self, rules: list[str]) -> None:
        """Widen this sandbox's allowlist from now on (an approval answered "once"). Raises PolicyError."""
        egress_proxy().allow(self.sandbox_id, rules)

    def take_denials(self) -> list[str]:
        """Refusals since the last call, each a sentence naming the host and how an operator allows it."""
        return egress_proxy().take_denials(self.sandbox_id)

    def close(self) -> None:
        """Stop serving the sandbox; its audit log stays (`hermetic sandbox egress ID` after the end)."""
        egress_proxy().detach(self.sandbox_id)
        shutil.rmtree(self.socket_dir, ignore_errors=True)


__all__ = [
    "Credential",
    "Egress",
    "ExposeError",
    "Exposure",
    "Ingress",
    "NET_ROOT",
    "NetworkConfig",
    "Policy",
    "PolicyError",
    "SANDBOX_INGRESS_DIR",
    "SANDBOX_NET_DIR",
    "SYSTEM_CA_FILE",
    "audit_path",
    "exposures",
    "forget",
    "net_dir",
    "open_ingress",
    "read_audit",
]
