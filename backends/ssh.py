"""SSH backend: the runtime on a remote host, over one exec channel of a paramiko connection.

Isolation is the remote user's. Commands run as that user, on the host's own filesystem, network and
process table, with the limits the host gives that user: no read-only system, no private /tmp, no
network policy, no pids/memory/CPU limits. Use a dedicated, unprivileged account (or a VM) for
untrusted work. What Hermetic controls: which control-plane environment variables go in (only
`spec.env` and the names in `spec.env_allow`; the remote user's own login environment is theirs),
the per-sandbox workspace (under `workspace_root`, removed on close), and the host key check.
"""

from __future__ import annotations

import json
import logging
import shlex
from pathlib import Path
from typing import Literal

import paramiko
from paramiko.ssh_exception import SSHException
from pydantic import BaseModel, ConfigDict

import sandboxes

from .base import Backend, Sandbox, new_sandbox_id
from .channel import Channel
from .errors import BackendUnavailable, HandshakeError, SandboxError, SandboxGone, UnsupportedSpec
from .snapshots import Snapshot
from .spec import SandboxSpec
from .sshhost import (
    BOOT,
    AuthenticationFailed,
    HostUnreachable,
    RemoteCommandFailed,
    RemoteDiskFull,
    RemotePythonMissing,
    SSHChannelTransport,
    UnknownHostKey,
    connect,
    is_connected,
    probe,
    run,
    upload_runtime,
)
from .workspace_copy import copy_into, parse_saved, remove_dir, save_copy

log = logging.getLogger("hermetic.backends.ssh")

LOST = "shell sessions and background processes were lost; the workspace was kept"


class SSHConfig(BaseModel):
    """The ssh backend's settings: where to connect and where the runtime lives on the host."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["ssh"] = "ssh"
    host: str
    """Host name or address of the SSH server."""
    port: int = 22
    """Port of the SSH server."""
    user: str
    """Remote account the sandboxes run as: their isolation is this account's."""
    key_file: Path | None = None
    """Private key to log in with (tried before the agent's keys)."""
    use_agent: bool = True
    """Also offer the keys of the running ssh-agent (SSH_AUTH_SOCK)."""
    known_hosts: Path | None = None
    """known_hosts file to check the host key against; default ~/.ssh/known_hosts."""
    accept_new_host_keys: bool = False
    """Accept (with a warning) and record a host key not in known_hosts; a changed key is always refused."""
    workspace_root: str = "~/hermetic-workspaces"
    """Remote directory under which each sandbox gets its own workspace."""
    snapshot_root: str = "~/hermetic-snapshots"
    """Remote directory holding snapshots' copies of workspaces, one subdirectory per snapshot."""
    cache_dir: str = "~/.cache/hermetic"
    """Remote directory holding the uploaded runtime, one subdirectory per code hash."""
    python: str = "python3"
    """Remote python (>= 3.9) that runs the runtime: a name on the user's PATH or an absolute path."""
    site_dirs: list[str] = []
    """Remote directories put first on the runtime's import path: where Playwright is installed for
    the browser tools (`pip install --target DIR playwright`; setup.sh uses /opt/hermetic/site)."""
    bubblewrap: bool = False
    """Wrap the runtime in bubblewrap on the host. Not built yet: True is refused."""
    connect_timeout: float = 10
    """Seconds to wait for the TCP connection, the SSH banner and authentication."""

    def build(self) -> SSHBackend:
        return SSHBackend(self)


class SSHBackend(Backend):
    name = "ssh"
    lacks = {
        "isolation": "commands run as the remote user on the host's own filesystem and network "
        "(isolation is that user's): no private user, read-only system, private /tmp or network policy",
        "limits": "the remote user's processes share the host's limits: no per-sandbox pids or memory limit",
    }

    def __init__(self, config: SSHConfig) -> None:
        if config.bubblewrap:
            raise BackendUnavailable(
                "ssh backend: bubblewrap wrapping is not built yet; set bubblewrap: false"
            )
        self.config = config
        self._warned = False

    def create(self, spec: SandboxSpec) -> SSHSandbox:
        if spec.mounts:
            raise UnsupportedSpec(
                "the ssh backend cannot mount paths: the sandbox sees the host's filesystem"
            )
        if spec.network == "allowlist":
            raise UnsupportedSpec(
                "the ssh backend cannot enforce an allowlist: the remote user's network is theirs; "
                "use network 'none' or 'full'"
            )
        if spec.network == "none" and not spec.own_root and not self._warned:  # own_root: --unshare-net
            self._warned = True
            log.warning(
                "ssh backend: network policy 'none' and resource limits are not enforced on %s; "
                "sandboxes have the remote user's network and limits",
                self.config.host,
            )
        return self.opened(SSHSandbox(self, new_sandbox_id(), spec))  # connect, probe, upload, start

    def drop_snapshot_copy(self, snapshot: Snapshot) -> None:
        if snapshot.location.get("host") != self.config.host:
            raise SandboxError(
                f"snapshot {snapshot.id} is on {snapshot.location.get('host')}, not {self.config.host}"
            )
        client = connect(self.config)
        try:
            remote_shell(client, remove_dir(snapshot.location["path"]))
        finally:
            client.close()


class SSHSandbox(Sandbox):
    """A workspace on the remote host and a runtime in it. `spec.workdir` becomes the remote path."""

    backend = "ssh"

    def __init__(self, backend: SSHBackend, sandbox_id: str, spec: SandboxSpec) -> None:
        super().__init__(sandbox_id, spec)
        self.config = backend.config
        self.client: paramiko.SSHClient | None = None
        self.workspace: str | None = None
        """Absolute path of the workspace on the host, known once connected."""
        self._requested = spec.workspace or f"{self.config.workspace_root.rstrip('/')}/{sandbox_id}"
        self._transport: SSHChannelTransport | None = None

    def _connect(self) -> Channel:
        if not is_connected(self.client):
            self.client = connect(self.config)
        client = self.client
        assert client is not None
        try:
            facts = probe(client, self.config, self.workspace or self._requested)
            if self.workspace is None:
                self.workspace = facts.workspace
                if not self.spec.own_root:  # else the workspace is bound at the spec's workdir
                    self.spec = self.spec.model_copy(update={"workdir": facts.workspace})
            if facts.runtime != sandboxes.code_hash():
                log.info("runtime on %s is %s; uploading the current one", self.config.host, facts.runtime)
                upload_runtime(client, self.config, facts.cache)
            return self._start_runtime(client, f"{facts.cache}/{sandboxes.code_hash()}")
        except (OSError, EOFError, SSHException) as exc:
            raise SandboxGone(
                f"ssh sandbox {self.id}: connection to {self.config.host} failed: {exc}"
            ) from exc

    def _start_runtime(self, client: paramiko.SSHClient, runtime_path: str) -> Channel:
        assert self.workspace is not None
        workdir = self.spec.workdir if self.spec.own_root else self.workspace
        env = self.spec.given_env()
        env.update(
            HERMETIC_WORKSPACE=workdir,
            HERMETIC_ROOTS=f"{workdir}:/tmp",
            HERMETIC_OUTPUT_LIMIT=str(self.spec.output_limit),
        )
        settings = json.dumps({"env": env, "cwd": workdir, "path": self.config.site_dirs}).encode()
        transport = client.get_transport()
        assert transport is not None
        chan = transport.open_session(timeout=self.config.connect_timeout)
        command = shlex.join([self.config.python, "-c", BOOT, runtime_path])
        chan.exec_command(own_root(command, self.workspace, self.spec) if self.spec.own_root else command)
        self._transport = SSHChannelTransport(chan, self.id)
        self._transport.send(b"%016d" % len(settings) + settings)
        channel = Channel(self._transport, f"ssh sandbox {self.id} on {self.config.host}")
        channel.handshake()
        if channel.info.get("code_hash") != sandboxes.code_hash():
            channel.close()
            raise HandshakeError(
                f"runtime on {self.config.host} runs code {channel.info.get('code_hash')}, "
                f"expected {sandboxes.code_hash()}: its cache in {runtime_path} changed underneath"
            )
        return channel

    def _alive(self) -> bool:
        return is_connected(self.client) and self._transport is not None and not self._transport.exited

    def _recover(self) -> str:
        if is_connected(self.client):
            return f"the sandbox's runtime on {self.config.host} stopped and was restarted: {LOST}"
        if self.client is not None:
            self.client.close()
        try:
            self.client = connect(self.config)  # once: a failure surfaces to the caller now
        except BackendUnavailable as exc:
            raise SandboxGone(
                f"ssh sandbox {self.id}: the connection to {self.config.host} dropped and could not be "
                f"reopened: {exc}"
            ) from exc
        return f"the SSH connection to {self.config.host} dropped and was reopened: {LOST}"

    # -- snapshots: copies on the remote host (backends/workspace_copy.py) -------------------------

    def _remote(self, command: str) -> str:
        if not is_connected(self.client):
            self.client = connect(self.config)
        assert self.client is not None
        return remote_shell(self.client, command)

    def _save_workspace(self, snapshot_id: str) -> tuple[dict[str, str], int]:
        assert self.workspace is not None
        dest = f"{self.config.snapshot_root.rstrip('/')}/{snapshot_id}"
        size, path = parse_saved(self._remote(save_copy(self.workspace, dest)))
        return {"host": self.config.host, "path": path}, size

    def _seed_workspace(self, location: dict[str, str]) -> None:
        if location.get("host") != self.config.host:
            raise SandboxError(f"the snapshot's copy is on {location.get('host')}, not on {self.config.host}")
        assert self.workspace is not None
        self._remote(copy_into(location["path"], self.workspace))

    def _fork_workspace(self) -> Sandbox:
        assert self.origin is not None and self.workspace is not None
        child = self.origin.create(self.spec.model_copy(update={"workspace": None, "from_snapshot": None}))
        try:
            assert isinstance(child, SSHSandbox) and child.workspace is not None
            self._remote(copy_into(self.workspace, child.workspace))
        except BaseException:
            child.close()
            raise
        return child

    def _destroy(self) -> None:
        if self.workspace is not None and self.spec.workspace is None:
            try:
                if not is_connected(self.client):
                    self.client = connect(self.config)
                assert self.client is not None
                status, _, err = run(self.client, shlex.join(["rm", "-rf", "--", self.workspace]))
                if status != 0:
                    log.warning("sandbox %s: removing workspace %s: %s", self.id, self.workspace, err.strip())
            except (BackendUnavailable, OSError, EOFError, SSHException) as exc:
                log.warning(
                    "sandbox %s: workspace %s on %s not removed: %s",
                    self.id,
                    self.workspace,
                    self.config.host,
                    exc,
                )
        if self.client is not None:
            self.client.close()


# A root of its own on the host: each top-level directory bound as it is (the remote user's view), then
# the workspace at the workdir and private /tmp and /proc; new top-level paths land on bwrap's tmpfs root.
_OWN_ROOT = """command -v bwrap >/dev/null || {
  echo 'own_root needs bubblewrap on this host: apt-get install bubblewrap' >&2; exit 127; }
set --
for e in /*; do
  case "$e" in
    /proc|/tmp) ;;
    /dev) set -- "$@" --dev-bind /dev /dev ;;
    *) if [ -L "$e" ]; then set -- "$@" --symlink "$(readlink "$e")" "$e"
       else set -- "$@" --bind "$e" "$e"; fi ;;
  esac
done
exec bwrap --die-with-parent --unshare-pid --proc /proc --tmpfs /tmp %(net)s "$@" \\
  --bind %(workspace)s %(workdir)s -- %(command)s
"""


def own_root(command: str, workspace: str, spec: SandboxSpec) -> str:
    """The remote shell command that runs `command` in bubblewrap with a root of its own."""
    script = _OWN_ROOT % {
        "net": "--unshare-net" if spec.network == "none" else "",
        "workspace": shlex.quote(workspace),
        "workdir": shlex.quote(spec.workdir),
        "command": command,
    }
    return shlex.join(["sh", "-c", script])


def remote_shell(client: paramiko.SSHClient, command: str) -> str:
    """A workspace_copy command on the host: its stdout, or SandboxError with its stderr."""
    try:
        status, out, err = run(client, command, timeout=600)
    except (OSError, EOFError, SSHException) as exc:
        raise SandboxGone(f"the connection dropped during a copy: {exc}") from exc
    if status != 0:
        raise SandboxError(err.strip() or f"exit status {status}")
    return out.strip()


__all__ = [
    "AuthenticationFailed",
    "HostUnreachable",
    "RemoteCommandFailed",
    "RemoteDiskFull",
    "RemotePythonMissing",
    "SSHBackend",
    "SSHConfig",
    "SSHSandbox",
    "UnknownHostKey",
]
