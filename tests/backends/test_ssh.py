"""What only the ssh backend does: host keys, authentication, the runtime's upload, reconnecting."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError
from sshd import LocalSSHD

from backends import SandboxSpec, SSHConfig
from backends.ssh import (
    AuthenticationFailed,
    HostUnreachable,
    RemoteDiskFull,
    RemotePythonMissing,
    SSHSandbox,
    UnknownHostKey,
)
from sandboxes import code_hash


def _create(config: SSHConfig, spec: SandboxSpec | None = None) -> SSHSandbox:
    return config.build().create(spec or SandboxSpec(network="full"))


def test_unknown_host_key_is_refused(sshd: LocalSSHD, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(UnknownHostKey, match="is not in .*accept_new_host_keys"):
        _create(sshd.config(known_hosts=empty))


def test_new_host_key_is_accepted_with_the_flag_warned_and_recorded(
    sshd: LocalSSHD, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    known = tmp_path / "ssh" / "known_hosts"
    with caplog.at_level(logging.WARNING), _create(sshd.config(known_hosts=known, accept_new_host_keys=True)):
        pass
    assert any("accepting the new host key" in r.message for r in caplog.records)
    assert known.read_text().split()[:2] == [f"[127.0.0.1]:{sshd.port}", "ssh-ed25519"]
    with _create(sshd.config(known_hosts=known)) as sb:  # recorded: now known without the flag
        assert sb.run("echo ok")["output"] == "ok\n"


def test_changed_host_key_is_refused_even_with_the_flag(sshd: LocalSSHD, tmp_path: Path) -> None:
    wrong = tmp_path / "known_hosts"
    wrong.write_text(f"[127.0.0.1]:{sshd.port} {(sshd.dir / 'other.pub').read_text()}")
    with pytest.raises(UnknownHostKey, match="does not match"):
        _create(sshd.config(known_hosts=wrong, accept_new_host_keys=True))


def test_the_connection_is_encrypted_with_an_aead_cipher_when_the_server_offers_one(sshd: LocalSSHD) -> None:
    with _create(sshd.config()) as sb:
        assert sb.client is not None
        transport = sb.client.get_transport()
        assert transport is not None
        assert (transport.local_cipher, transport.remote_cipher) == ("aes128-gcm@openssh.com",) * 2
        assert sb.run("echo ok")["output"] == "ok\n"


def test_key_the_server_does_not_know_is_an_authentication_error(sshd: LocalSSHD) -> None:
    with pytest.raises(AuthenticationFailed, match="refused authentication"):
        _create(sshd.config(key_file=sshd.other_key))


def test_no_key_and_no_agent_is_an_authentication_error(sshd: LocalSSHD) -> None:
    with pytest.raises(AuthenticationFailed, match="no key to offer"):
        _create(sshd.config(key_file=None, use_agent=False))


def test_port_nobody_listens_on_is_a_clear_error(sshd: LocalSSHD) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        started = time.monotonic()
        with pytest.raises(HostUnreachable, match=f"cannot reach an SSH server at 127.0.0.1:{port}"):
            _create(sshd.config(port=port))
    assert time.monotonic() - started < 5


def test_missing_python_is_a_clear_error(sshd: LocalSSHD) -> None:
    with pytest.raises(RemotePythonMissing, match="no python3 at '/nonexistent/python3'"):
        _create(sshd.config(python="/nonexistent/python3"))


def test_settings_reject_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        SSHConfig(host="h", user="u", hostname="typo")  # type: ignore[call-arg]


@pytest.fixture
def cache_dir(sshd: LocalSSHD) -> Iterator[str]:
    """A runtime cache of its own, so that the first create in a test always uploads."""
    remote = f"~/.cache/hermetic-test-{uuid.uuid4().hex[:8]}"
    yield remote
    with _create(sshd.config()) as sb:
        sb.run(f"rm -rf {remote}")


def test_runtime_is_uploaded_once_then_reused_until_it_is_altered(sshd: LocalSSHD, cache_dir: str) -> None:
    config = sshd.config(cache_dir=cache_dir)
    copy = f"{cache_dir}/{code_hash()}"
    inode = f"stat -c %i {copy}"
    with _create(config) as first:
        uploaded = first.run(inode)["output"]
    with _create(config) as second:  # same copy: not uploaded again
        assert second.run(inode)["output"] == uploaded
        second.run(f"echo '# tampered' >> {copy}/sandboxes/server.py")
    with _create(config) as third:  # an edited copy is replaced
        replaced = third.run(inode)["output"]
        assert replaced != uploaded
        assert "tampered" not in third.run(f"cat {copy}/sandboxes/server.py")["output"]
        third.run(f"rm {copy}/sandboxes/shell.py")
    with _create(config) as fourth:  # so is an incomplete one
        assert fourth.run(inode)["output"] != replaced
        assert fourth.channel.info["code_hash"] == code_hash()
        assert fourth.run(f"ls -a {cache_dir}")["output"].split() == [".", "..", code_hash()]


def _mount_tiny_tmpfs(path: Path) -> None:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16k,mode=1777", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        path.rmdir()
        pytest.skip(f"cannot mount a small tmpfs to fill up here: {done.stderr.strip()}")


def test_full_disk_during_upload_is_a_clear_error(sshd: LocalSSHD) -> None:
    full = Path(f"/tmp/hermetic-full-{uuid.uuid4().hex[:8]}")  # the test sshd's host is this machine
    _mount_tiny_tmpfs(full)
    try:
        with pytest.raises(RemoteDiskFull, match="no space left on 127.0.0.1"):
            _create(sshd.config(cache_dir=str(full)))
        assert [p.name for p in full.iterdir()] == []  # the partial copy was removed
    finally:
        subprocess.run(["umount", str(full)], check=True)
        full.rmdir()


def _runtime_exists(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_dropped_connection_is_reopened_on_the_next_call_with_a_notice(sshd: LocalSSHD) -> None:
    with _create(sshd.config()) as sb:
        sb.run("echo kept > note.txt && export GONE=1")
        runtime = sb.channel.info["pid"]
        # The server side of this connection dies (sshd's session process for it, as on a host reboot
        # or a network cut): the sshd process that owns the runtime is its parent.
        sshd_session = int(Path(f"/proc/{runtime}/stat").read_text().split(")")[-1].split()[1])
        os.kill(sshd_session, signal.SIGKILL)
        assert sb.client is not None
        transport = sb.client.get_transport()
        deadline = time.monotonic() + 10
        while transport is not None and transport.is_active() and time.monotonic() < deadline:
            time.sleep(0.01)
        result = sb.run("cat note.txt; echo ${GONE:-unset}")
        notices = sb.pop_notices()
        assert sb.channel.info["pid"] != runtime
    assert result["output"] == "kept\nunset\n"
    assert len(notices) == 1 and "SSH connection to 127.0.0.1 dropped and was reopened" in notices[0]
    assert "shell sessions and background processes were lost" in notices[0]
    deadline = time.monotonic() + 10
    while _runtime_exists(runtime) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _runtime_exists(runtime)  # the old runtime saw its stream end and stopped


def test_spec_env_reaches_the_shells_but_no_command_line(sshd: LocalSSHD) -> None:
    secret = "sk-" + uuid.uuid4().hex
    with _create(sshd.config(), SandboxSpec(network="full", env={"TOKEN": secret})) as sb:
        assert sb.run("echo $TOKEN")["output"] == secret + "\n"
        command_lines = sb.run("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")["output"]
    assert secret not in command_lines


def test_given_workspace_is_used_and_kept_on_close(sshd: LocalSSHD) -> None:
    kept = f"~/hermetic-kept-{uuid.uuid4().hex[:8]}"
    with _create(sshd.config(), SandboxSpec(network="full", workspace=kept)) as sb:
        sb.call("fs.write", {"path": "left.txt", "content": "still here"})
        assert sb.workspace is not None and sb.workspace.endswith(kept[2:])
    with _create(sshd.config()) as other:
        assert other.run(f"cat {kept}/left.txt && rm -r {kept}")["output"] == "still here"
