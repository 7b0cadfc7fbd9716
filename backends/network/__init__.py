"""A sandbox's network doors: the egress allowlist (policy), the proxy that enforces it, exposed ports.

Backends call `Egress.attach` for a sandbox on `network: allowlist`, bind-mount its socket directory at
SANDBOX_NET_DIR (or mount the whole net root, shared as a volume, at a path given as `volume_at`) and
put `Egress.env` in the sandbox's environment; the sandbox's own network stays `none`. Nothing here
imports the control plane.
"""

from __future__ import annotations

import contextlib
import glob
import json
import secrets
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
"""Per sandbox: `<id>.<random>/sock/` (mounted into the sandbox) and `<id>.<random>/egress.jsonl` (the
audit log). Mode 0711: whoever shares it (docker's sockets volume) can list none of it."""
SANDBOX_NET_DIR = "/run/hermetic"
SYSTEM_CA_FILE = "/etc/ssl/certs/ca-certificates.crt"
"""Debian's (and OpenSSL's default) CA file: with credentials, a bundle adding the sandbox CA is bound
read-only over it, for programs that ignore the CA variables."""
TRUST_STORE_NAME = "ca-certificates.crt"


def net_dir(sandbox_id: str, root: Path = NET_ROOT) -> Path:
    """A sandbox's directory of doors: sock/ (egress), in/ (ingress), exposed/, egress.jsonl.

    Named `<id>.<random>` in an unlistable root, so a sandbox that sees the root (a shared volume)
    reaches only the directory it was told, never another sandbox's. Not created here (open_net_dir);
    for a sandbox that has none, a path that does not exist."""
    found = sorted(root.glob(f"{glob.escape(sandbox_id)}.*"))
    # 72 random bits, in 12 characters: a socket's path must fit in 107 bytes
    return found[0] if found else root / f"{sandbox_id}.{secrets.token_urlsafe(9)}"


def sandbox_of(directory: Path) -> str:
    """Whose a net_dir is: the sandbox id in its name."""
    return directory.name.partition(".")[0]


def open_net_dir(sandbox_id: str, root: Path = NET_ROOT) -> Path:
    """The sandbox's directory of doors, created (0711, like `root`) if it is not there yet."""
    root.mkdir(parents=True, exist_ok=True)
    if root.stat().st_mode & 0o777 != 0o711:
        root.chmod(0o711)
    directory = net_dir(sandbox_id, root)
    directory.mkdir(mode=0o711, exist_ok=True)
    return directory


def open_ingress(sandbox_id: str, root: Path = NET_ROOT, volume_at: str | None = None) -> Ingress:
    """The sandbox's ingress directory, created: mount it at SANDBOX_INGRESS_DIR, read-write, or, with
    `volume_at`, the sandbox sees `root` there."""
    directory = open_net_dir(sandbox_id, root)
    inside = f"{volume_at}/{directory.name}/in" if volume_at else SANDBOX_INGRESS_DIR
    return Ingress(sandbox_id, directory, inside).create()


def forget(sandbox_id: str, root: Path = NET_ROOT) -> None:
    """Remove the doors of a sandbox another (dead) process created; its audit log stays."""
    directory = net_dir(sandbox_id, root)
    for part in ("sock", "in", "exposed"):
        shutil.rmtree(directory / part, ignore_errors=True)
    with contextlib.suppress(OSError):
        directory.rmdir()


def audit_path(sandbox_id: str, root: Path = NET_ROOT) -> Path:
    return net_dir(sandbox_id, root) / "egress.jsonl"


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
    inside: str = SANDBOX_NET_DIR
    """Where the sandbox sees `socket_dir`."""

    @classmethod
    def attach(
        cls,
        sandbox_id: str,
        rules: list[str],
        credentials: list[Credential] | None = None,
        root: Path = NET_ROOT,
        volume_at: str | None = None,
    ) -> Egress:
        """Serve the sandbox on `sock/egress.sock` in its net_dir under `rules`, adding `credentials` to
        the requests for their hosts; with `volume_at`, the sandbox sees `root` there. Raises
        PolicyError (a bad rule, a credential's variable unset)."""
        found = tuple(credentials or ())
        for credential in found:
            credential.resolve()  # every variable set now, or the sandbox is not made
        directory = open_net_dir(sandbox_id, root)
        inside = f"{volume_at}/{directory.name}/sock" if volume_at else SANDBOX_NET_DIR
        egress = cls(sandbox_id, directory / "sock", directory / "egress.jsonl", found, inside)
        egress_proxy().attach(sandbox_id, egress.socket_dir, Policy(rules), egress.audit, found)
        return egress

    @property
    def env(self) -> dict[str, str]:
        """What the runtime needs to start its loopback bridge (it sets the proxy variables itself), the
        CA it trusts for the credentials' hosts, and a placeholder in each credential's variable."""
        env = {"HERMETIC_EGRESS_SOCKET": f"{self.inside}/{SOCKET_NAME}"}
        if self.credentials:
            env["HERMETIC_EGRESS_CA"] = f"{self.inside}/{CA_NAME}"
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
        with contextlib.suppress(OSError):  # kept when it holds the audit log or the ingress
            self.socket_dir.parent.rmdir()


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
    "sandbox_of",
]
