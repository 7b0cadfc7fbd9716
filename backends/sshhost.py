"""The ssh backend's remote host: connecting with clear errors, probing it, keeping its runtime current."""

from __future__ import annotations

import json
import logging
import secrets
import shlex
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import paramiko
from paramiko.buffered_pipe import PipeTimeout
from paramiko.ssh_exception import (
    AuthenticationException,
    BadHostKeyException,
    NoValidConnectionsError,
    PasswordRequiredException,
    SSHException,
)

import sandboxes

from .bundle import READ_FRAME
from .channel import Transport, log_stderr_lines
from .errors import BackendUnavailable, SandboxError
from .local import RUNTIME_DIR

log = logging.getLogger("hermetic.backends.ssh")

MIN_PYTHON = (3, 9)
KEEPALIVE = 30
AEAD_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
"""Offered first: one AEAD pass per packet instead of AES-CTR plus a separate HMAC, 6% off a `true`
round trip (docs/performance.md); paramiko's other ciphers stay offered after them."""


class HostSettings(Protocol):
    """What the host functions read of the ssh backend's settings (backends.ssh.SSHConfig documents each)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def key_file(self) -> Path | None: ...
    @property
    def use_agent(self) -> bool: ...
    @property
    def known_hosts(self) -> Path | None: ...
    @property
    def accept_new_host_keys(self) -> bool: ...
    @property
    def cache_dir(self) -> str: ...
    @property
    def python(self) -> str: ...
    @property
    def connect_timeout(self) -> float: ...


class HostUnreachable(BackendUnavailable):
    """No SSH server answered at host:port (refused, no route, timeout, not SSH)."""


class AuthenticationFailed(BackendUnavailable):
    """The SSH server refused the key or the agent's keys."""


class UnknownHostKey(BackendUnavailable):
    """The host's key is not in known_hosts (and accept_new_host_keys is off), or differs from it."""


class RemotePythonMissing(BackendUnavailable):
    """The host has no python3 >= 3.9 at the configured path."""


class RemoteDiskFull(SandboxError):
    """The runtime could not be uploaded: the host's disk is full where the cache lives."""


class RemoteCommandFailed(SandboxError):
    """A short housekeeping command on the host failed."""


# Run as `python3 -c PROBE CACHE_DIR CODE_HASH WORKSPACE`. Written for any python, so that an old one
# can still say its version. Reports the python version, and on >= 3.9 the hash of the runtime copy
# in the cache (computed like sandboxes.code_hash, from the files themselves: a half-finished or
# edited copy never passes), after creating the workspace (0700) and the cache dir.
PROBE = r"""
import hashlib, json, os, shutil, sys
out = {"python": "%d.%d" % sys.version_info[:2]}
if sys.version_info >= (3, 9):
    cache, code, workspace = [os.path.expanduser(a) for a in sys.argv[1:4]]
    pkg = os.path.join(cache, code, "sandboxes")
    files = []
    for root, dirs, names in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [os.path.relpath(os.path.join(root, n), pkg) for n in names if n.endswith(".py")]
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0")
        with open(os.path.join(pkg, rel), "rb") as fh:
            digest.update(fh.read() + b"\0")
    os.makedirs(cache, mode=0o700, exist_ok=True)
    os.makedirs(workspace, mode=0o700, exist_ok=True)
    out.update(
        cache=os.path.realpath(cache),
        workspace=os.path.realpath(workspace),
        runtime=digest.hexdigest()[:16] if files else None,
        bwrap=shutil.which("bwrap"),
    )
print(json.dumps(out))
"""

# Run as `python3 -c BOOT RUNTIME_PATH`: reads a 16-digit length and that much JSON from stdin
# (settings: environment, working directory and extra import dirs, kept off the command line where
# `ps` shows it),
# then serves the runtime on the same stdin/stdout.
BOOT = (
    READ_FRAME
    + r"""
import json
settings = json.loads(frame())
os.environ.update(settings["env"])
os.chdir(settings["cwd"])
sys.path[:0] = [sys.argv[1]] + [os.path.expanduser(d) for d in settings.get("path", [])]
runpy.run_module("sandboxes", run_name="__main__", alter_sys=True)
"""
)

FREE_SPACE = "import os, sys; s = os.statvfs(sys.argv[1]); print(s.f_bavail * s.f_frsize)"


@dataclass
class HostFacts:
    """What the probe found on the host (absolute paths, `~` expanded)."""

    python: str
    cache: str
    workspace: str
    runtime: str | None
    bwrap: str | None


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    def __init__(self, accept_new: bool, known_hosts: Path) -> None:
        self.accept_new = accept_new
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        described = f"{key.get_name()} {key.fingerprint}"
        if not self.accept_new:
            raise UnknownHostKey(
                f"host key of {hostname} ({described}) is not in {self.known_hosts}: add it "
                f"(ssh-keyscan, or connect once with `ssh`) or set accept_new_host_keys"
            )
        log.warning(
            "accepting the new host key of %s (%s) because accept_new_host_keys is on; recorded in %s",
            hostname,
            described,
            self.known_hosts,
        )
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self.known_hosts.open("a") as fh:
            fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def connect(config: HostSettings) -> paramiko.SSHClient:
    """An authenticated connection. Raises HostUnreachable, AuthenticationFailed, UnknownHostKey."""
    where = f"{config.user}@{config.host}:{config.port}"
    known_hosts = (config.known_hosts or Path("~/.ssh/known_hosts")).expanduser()
    client = paramiko.SSHClient()
    if known_hosts.exists():
        client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(_HostKeyPolicy(config.accept_new_host_keys, known_hosts))
    try:
        client.connect(
            config.host,
            config.port,
            username=config.user,
            key_filename=str(config.key_file.expanduser()) if config.key_file else None,
            allow_agent=config.use_agent,
            look_for_keys=False,
            timeout=config.connect_timeout,
            banner_timeout=config.connect_timeout,
            auth_timeout=config.connect_timeout,
            transport_factory=_aead_first,
        )
    except UnknownHostKey:
        client.close()
        raise
    except BadHostKeyException as exc:
        client.close()
        raise UnknownHostKey(
            f"host key of {config.host}:{config.port} does not match {known_hosts} "
            f"(got {exc.key.get_name()} {exc.key.fingerprint}): the host changed, or someone is in between"
        ) from exc
    except PasswordRequiredException as exc:
        client.close()
        raise AuthenticationFailed(
            f"key {config.key_file} needs a passphrase: load it into an agent"
        ) from exc
    except AuthenticationException as exc:
        client.close()
        how = f"key {config.key_file}" if config.key_file else "no key file"
        how += ", agent keys" if config.use_agent else ", no agent"
        raise AuthenticationFailed(f"{where} refused authentication ({how}): {exc}") from exc
    except (NoValidConnectionsError, TimeoutError, OSError) as exc:
        client.close()
        raise HostUnreachable(f"cannot reach an SSH server at {config.host}:{config.port}: {exc}") from exc
    except SSHException as exc:
        client.close()
        if "authentication methods" in str(exc):
            raise AuthenticationFailed(f"{where}: no key to offer: set key_file or use_agent") from exc
        raise HostUnreachable(f"SSH handshake with {config.host}:{config.port} failed: {exc}") from exc
    transport = client.get_transport()
    assert transport is not None
    # a reply is often a small write behind a large one: without NODELAY it waits for the ACK (delayed
    # by up to 40 ms) of what went before it
    transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    transport.set_keepalive(KEEPALIVE)
    return client


def _aead_first(sock: Any, **options: Any) -> paramiko.Transport:
    transport = paramiko.Transport(sock, **options)
    security = transport.get_security_options()
    offered = tuple(security.ciphers)
    security.ciphers = tuple(c for c in AEAD_CIPHERS if c in offered) + tuple(
        c for c in offered if c not in AEAD_CIPHERS
    )
    return transport


def is_connected(client: paramiko.SSHClient | None) -> bool:
    transport = client.get_transport() if client is not None else None
    return transport is not None and transport.is_active()


def run(client: paramiko.SSHClient, command: str, timeout: float = 60.0) -> tuple[int, str, str]:
    """A short command on its own exec channel: (exit status, stdout, stderr)."""
    transport = client.get_transport()
    assert transport is not None
    chan = transport.open_session(timeout=timeout)
    try:
        chan.settimeout(timeout)
        chan.exec_command(command)
        chan.shutdown_write()
        out = chan.makefile("rb").read()
        err = chan.makefile_stderr("rb").read()
        return chan.recv_exit_status(), out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    finally:
        chan.close()


def probe(client: paramiko.SSHClient, config: HostSettings, workspace: str) -> HostFacts:
    """Check python and the runtime copy, create the workspace. Raises RemotePythonMissing."""
    code = sandboxes.code_hash()
    command = shlex.join([config.python, "-c", PROBE, config.cache_dir, code, workspace])
    status, out, err = run(client, command)
    if status in (126, 127):
        raise RemotePythonMissing(
            f"no python3 at {config.python!r} on {config.host} ({err.strip()}): install python3 >= "
            f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]} there or set `python` to its path"
        )
    try:
        found: dict[str, Any] = json.loads(out)
    except ValueError:
        raise RemoteCommandFailed(f"probing {config.host} failed (exit {status}): {err.strip()}") from None
    version = tuple(int(x) for x in found["python"].split("."))
    if version < MIN_PYTHON:
        raise RemotePythonMissing(
            f"{config.python} on {config.host} is Python {found['python']}; the runtime needs "
            f">= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}: install a newer python3 or set `python` to one"
        )
    return HostFacts(found["python"], found["cache"], found["workspace"], found["runtime"], found["bwrap"])


def upload_runtime(client: paramiko.SSHClient, config: HostSettings, cache: str) -> None:
    """Copy the runtime into `<cache>/<code hash>/sandboxes` over SFTP: into a fresh directory first,
    renamed into place when complete (a stale copy is moved aside and removed). Raises RemoteDiskFull.
    """
    code = sandboxes.code_hash()
    final, tmp, stale = f"{cache}/{code}", f"{cache}/.{code}.{secrets.token_hex(4)}", ""
    sizes = 0
    with client.open_sftp() as sftp:
        try:
            sftp.mkdir(tmp, 0o700)
            for rel in sandboxes.source_files():
                parts = Path("sandboxes", rel).parts
                for depth in range(1, len(parts)):
                    folder = "/".join((tmp, *parts[:depth]))
                    try:
                        sftp.stat(folder)
                    except OSError:
                        sftp.mkdir(folder, 0o700)
                data = (RUNTIME_DIR / rel).read_bytes()
                sizes += len(data)
                with sftp.open(f"{tmp}/sandboxes/{rel}", "wb") as fh:
                    fh.write(data)
            try:
                sftp.stat(final)
                stale = f"{cache}/.stale.{secrets.token_hex(4)}"
                sftp.posix_rename(final, stale)
            except FileNotFoundError:
                pass
            try:
                sftp.posix_rename(tmp, final)
            except OSError:  # another control plane put a copy in place first: the handshake checks it
                log.info("runtime copy on %s appeared concurrently; using it", config.host)
        except (OSError, SSHException) as exc:
            _remove(client, tmp)
            _raise_upload_error(client, config, cache, sizes, exc)
    _remove(client, tmp)
    if stale:
        _remove(client, stale)
    log.info("uploaded runtime %s to %s:%s", code, config.host, final)


def _raise_upload_error(
    client: paramiko.SSHClient, config: HostSettings, cache: str, needed: int, exc: Exception
) -> None:
    # SFTP (v3) reports a full disk as a bare "Failure": ask the host how much room is left.
    status, out, _ = run(client, shlex.join([config.python, "-c", FREE_SPACE, cache]))
    free = int(out) if status == 0 and out.strip().isdigit() else None
    if free is not None and free < 2 * max(needed, 1) + (1 << 20):
        raise RemoteDiskFull(
            f"no space left on {config.host} in {cache} for the runtime ({free} bytes free): "
            "free some space or point cache_dir at another filesystem"
        ) from exc
    raise RemoteCommandFailed(f"uploading the runtime to {config.host}:{cache} failed: {exc}") from exc


def _remove(client: paramiko.SSHClient, path: str) -> None:
    status, _, err = run(client, shlex.join(["rm", "-rf", "--", path]))
    if status != 0:
        log.warning("could not remove %s on the host: %s", path, err.strip())


class SSHChannelTransport(Transport):
    """One exec channel: stdin/stdout carry the protocol, stderr goes to the log."""

    def __init__(self, chan: paramiko.Channel, label: str) -> None:
        self._chan = chan
        self._label = label
        self._send_lock = threading.Lock()  # sendall goes out in window-sized pieces: keep lines whole
        threading.Thread(
            target=log_stderr_lines, args=(chan.makefile_stderr("rb"), label), daemon=True
        ).start()

    def send(self, data: bytes) -> None:
        with self._send_lock:
            try:
                self._chan.sendall(data)
            except SSHException as exc:
                raise OSError(str(exc)) from exc

    def recv(self, timeout: float | None) -> bytes | None:
        # The caller waits on the channel's stdout buffer itself: not with chan.settimeout (it would
        # apply to a concurrent sendall too), nor on its fileno() (readable on stderr data as well), nor
        # through a thread moving stdout into a queue (a thread hand-off per reply: 0.1 ms of 0.7).
        # A read of 0 bytes waits for data or the end and takes nothing; recv then takes what is there
        # and acknowledges it to the window.
        try:
            self._chan.in_buffer.read(0, timeout)
            return self._chan.recv(65536)
        except PipeTimeout:
            return None
        except (OSError, EOFError, SSHException) as exc:  # the stream broke: for the channel, its end
            log.warning("%s: stdout stream failed: %s", self._label, exc)
            return b""

    def close(self, wait: float = 5.0) -> None:
        """Send EOF so the runtime stops its shells and processes, wait for it a little, then close."""
        try:
            transport = self._chan.get_transport()
            if not self._chan.closed and transport is not None and transport.is_active():
                self._chan.shutdown_write()
                self._chan.status_event.wait(wait)
        except (OSError, SSHException, EOFError):
            pass
        self._chan.close()

    @property
    def exited(self) -> bool:
        return bool(self._chan.closed or self._chan.exit_status_ready())
