"""A throwaway OpenSSH server on 127.0.0.1 with generated keys, for tests and benchmarks.

As root it logs in an unprivileged user, `hermetic-ssh-test` (created when absent); otherwise the
user running it. Needs `openssh-server` (`apt-get install openssh-server`).
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends.ssh import SSHConfig

SSHD = "/usr/sbin/sshd"
TEST_USER = "hermetic-ssh-test"


class SSHDUnavailable(Exception):
    """No sshd can be started here; the message says why."""


@dataclass
class LocalSSHD:
    dir: Path
    port: int
    user: str
    client_key: Path
    """A private key the server accepts."""
    other_key: Path
    """A private key the server does not accept."""
    known_hosts: Path
    """A known_hosts file holding the server's host key."""
    proc: subprocess.Popen[bytes] = field(repr=False)

    def config(self, **overrides: Any) -> SSHConfig:
        """Settings for the ssh backend pointing at this server (key auth, known host key, no agent)."""
        settings: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": self.port,
            "user": self.user,
            "key_file": self.client_key,
            "use_agent": False,
            "known_hosts": self.known_hosts,
            # setup.sh installs Playwright there for the host's python3, for the browser tests
            "site_dirs": [HOST_SITE] if os.path.isdir(HOST_SITE) else [],
        }
        settings.update(overrides)
        return SSHConfig(**settings)

    def ssh_argv(self, *command: str) -> list[str]:
        """The OpenSSH client's command line for running `command` on this server."""
        return [
            "ssh",
            "-i",
            str(self.client_key),
            "-p",
            str(self.port),
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            f"{self.user}@127.0.0.1",
            *command,
        ]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


HOST_SITE = "/opt/hermetic/site"


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SSHDUnavailable(f"{' '.join(argv)} failed: {done.stderr.strip()}")


def _ensure_user() -> str:
    if os.geteuid() != 0:
        return getpass.getuser()
    if subprocess.run(["id", TEST_USER], capture_output=True).returncode != 0:
        # '*' (not useradd's locked '!'): with UsePAM no, sshd refuses locked accounts even for keys.
        _run("useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", TEST_USER)
    return TEST_USER


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_sshd(timeout: float = 15.0) -> LocalSSHD:
    """Generate keys, write a config and start sshd on a free port. Raises SSHDUnavailable."""
    if not Path(SSHD).exists() or shutil.which("ssh-keygen") is None:
        raise SSHDUnavailable(f"{SSHD} or ssh-keygen is missing: apt-get install openssh-server")
    user = _ensure_user()
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
    root = Path(tempfile.mkdtemp(prefix="hermetic-sshd-"))
    root.chmod(0o755)  # sshd reads authorized_keys as the logged-in user
    for name in ("host", "client", "other"):
        _run(
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            f"hermetic-test-{name}",
            "-f",
            str(root / name),
        )
    authorized = root / "authorized_keys"
    authorized.write_text((root / "client.pub").read_text())
    authorized.chmod(0o644)
    port = _free_port()
    known_hosts = root / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {(root / 'host.pub').read_text()}")
    (root / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {root / 'host'}\nPidFile {root / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {authorized}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        f"AllowUsers {user}\nSubsystem sftp internal-sftp\nMaxStartups 100\nMaxSessions 100\n"
        "LogLevel INFO\n"
    )
    log = (root / "sshd.log").open("wb")
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(root / "sshd_config")], stdout=log, stderr=subprocess.STDOUT
    )
    server = LocalSSHD(root, port, user, root / "client", root / "other", known_hosts, proc)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = (root / "sshd.log").read_text(errors="replace")
            server.stop()
            raise SSHDUnavailable(f"sshd exited with {proc.returncode}: {text.strip()}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return server
        except OSError:
            time.sleep(0.05)
    server.stop()
    raise SSHDUnavailable(f"sshd did not listen on 127.0.0.1:{port} within {timeout} s")
