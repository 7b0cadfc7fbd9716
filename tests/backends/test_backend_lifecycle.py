"""Creating, losing and recovering sandboxes; Docker's hardening and reaper."""

from __future__ import annotations

import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from backends import Backend, SandboxGone, SandboxSpec
from backends.base import MANAGED_LABEL
from backends.docker import EXPIRES_LABEL, OWNER_LABEL, DockerBackend, DockerSandbox
from backends.local import LocalSandbox
from backends.modal import ModalSandbox
from backends.ssh import SSHSandbox
from sandboxes import code_hash


def _kill_substrate(sandbox: object) -> None:
    if isinstance(sandbox, DockerSandbox):
        sandbox.container.remove(force=True)
    elif isinstance(sandbox, LocalSandbox):
        assert sandbox._proc is not None
        sandbox._proc.kill()
        sandbox._proc.wait()
    elif isinstance(sandbox, SSHSandbox):  # the connection drops: everything on it goes
        assert sandbox.client is not None
        transport = sandbox.client.get_transport()
        assert transport is not None
        transport.sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 10
        while transport.is_active() and time.monotonic() < deadline:
            time.sleep(0.01)
    elif isinstance(sandbox, ModalSandbox):  # the runtime dies; the Modal sandbox (and workspace) lives on
        sandbox.modal.kill_exec(sandbox.modal.processes[-1])  # type: ignore[union-attr]
        # No local process to poll here, as on real Modal: the stream's end is the news. Wait for it.
        sandbox._channel.wait_closed(10)  # type: ignore[union-attr]
    else:
        raise AssertionError(f"no way to kill {sandbox!r}")


def test_vanished_sandbox_is_recreated_on_next_use_with_a_notice(backend: Backend) -> None:
    with backend.create(SandboxSpec()) as sb:
        sb.run("echo kept > note.txt && export GONE=1")
        _kill_substrate(sb)
        result = sb.run("cat note.txt; echo ${GONE:-unset}")
        notices = sb.pop_notices()
    assert len(notices) == 1 and "shell sessions" in notices[0] and "lost" in notices[0]
    assert result["output"] == "kept\nunset\n"  # workspace kept, shell state lost


def test_a_sandbox_outlives_the_thread_that_created_it(backend: Backend) -> None:
    """bwrap's --die-with-parent fires when the creating *thread* ends, not the process: a sandbox made
    in a pool thread (asyncio.run's executor, a warm pool's refill) must not die with that thread."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        sb = pool.submit(backend.create, SandboxSpec()).result()
        pool.submit(sb.run, "export KEPT=yes").result()
    with sb:  # the pool's thread has ended
        assert sb.run("echo ${KEPT:-lost}")["output"] == "yes\n"
        assert sb.pop_notices() == []


def test_closing_removes_everything(backend: Backend) -> None:
    sb = backend.create(SandboxSpec())
    sb.close()
    if isinstance(sb, DockerSandbox):
        client = sb._client
        assert not client.containers.list(all=True, filters={"label": f"org.hermetic.sandbox={sb.id}"})
        assert not client.volumes.list(filters={"name": sb.volume_name})
    elif isinstance(sb, LocalSandbox):
        assert not sb.dir.exists()
    elif isinstance(sb, SSHSandbox):  # the test sshd runs on this machine: its workspace is local
        assert sb.workspace is not None and not Path(sb.workspace).exists()
    elif isinstance(sb, ModalSandbox):
        standin = sb.modal
        assert standin.poll() is not None and not standin.root.exists()  # type: ignore[union-attr]
        assert all(p.poll() is not None for p in standin.processes)  # type: ignore[union-attr]
    else:
        raise AssertionError(f"no way to check {sb!r}")


@pytest.fixture
def docker_backend(backend: Backend) -> DockerBackend:
    if not isinstance(backend, DockerBackend):
        pytest.skip("docker-only behaviour")
    return backend


def test_docker_container_is_hardened(docker_backend: DockerBackend) -> None:
    with docker_backend.create(SandboxSpec(memory="300m", pids=99, cpus=0.5)) as sb:
        host = sb.container.attrs["HostConfig"]
        config = sb.container.attrs["Config"]
    assert host["CapDrop"] == ["ALL"] and host["SecurityOpt"] == ["no-new-privileges"]
    assert host["ReadonlyRootfs"] and host["NetworkMode"] == "none" and host["Init"]
    assert host["PidsLimit"] == 99 and host["Memory"] == 300 << 20 and host["NanoCpus"] == 500_000_000
    assert config["User"] == "1000:1000" and "/tmp" in host["Tmpfs"]
    assert not any("docker.sock" in b for b in host.get("Binds") or [])
    assert config["Labels"][MANAGED_LABEL] == "1"


def test_stale_runtime_in_the_image_is_replaced_over_the_stream(docker_backend: DockerBackend) -> None:
    image = SandboxSpec().image
    docker_backend._runtime_hashes[image] = "an-older-runtime"
    try:
        with docker_backend.create(SandboxSpec()) as sb:
            assert sb.channel.info["code_hash"] == code_hash()
            assert sb.run("echo fresh")["output"] == "fresh\n"
    finally:
        docker_backend._runtime_hashes.pop(image)


def test_reaper_removes_orphans_and_expired_sandboxes(docker_backend: DockerBackend) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    client = docker_backend.client
    orphan = client.containers.run(
        SandboxSpec().image,
        ["sleep", "infinity"],
        detach=True,
        labels={MANAGED_LABEL: "1", OWNER_LABEL: f"{socket.gethostname()}:{gone.pid}"},
    )
    expired = client.containers.run(
        SandboxSpec().image,
        ["sleep", "infinity"],
        detach=True,
        labels={MANAGED_LABEL: "1", EXPIRES_LABEL: str(int(time.time()) - 1)},
    )
    unrelated = client.containers.run(SandboxSpec().image, ["sleep", "infinity"], detach=True)
    try:
        assert docker_backend.reap() >= 2
        remaining = {c.id for c in client.containers.list(all=True)}
        assert orphan.id not in remaining and expired.id not in remaining and unrelated.id in remaining
    finally:
        unrelated.remove(force=True)


def test_a_live_sandbox_stopped_for_a_restart_survives_another_reaper(docker_backend: DockerBackend) -> None:
    """Between its runtime's end and the next call's restart, a sandbox's container is stopped: another
    control plane starting on this dockerd (each reaps at start) must leave it and its ingress directory
    to the owner, which is alive (CI: the recreated container's bind source had been removed)."""
    with docker_backend.create(SandboxSpec()) as sb:
        assert sb.ingress is not None and sb.ingress.dir.is_dir()
        sb.run("echo kept > note")
        assert sb.call("sys.shutdown") == {"stopping": True}  # the runtime ends; its container stops
        deadline = time.monotonic() + 120
        while sb.container.status != "exited":
            assert time.monotonic() < deadline, "the container never stopped"
            time.sleep(0.1)
        DockerBackend(docker_backend.config)  # reaps on start
        assert sb.ingress.dir.is_dir()
        assert sb.run("cat note")["output"] == "kept\n"
        assert "runtime stopped and was restarted" in sb.pop_notices()[0]


def test_ttl_destroys_the_sandbox_and_it_is_not_recreated(backend: Backend) -> None:
    sb = backend.create(SandboxSpec(ttl=2))
    assert sb.run("echo alive")["output"] == "alive\n"
    time.sleep(3)
    if isinstance(sb, DockerSandbox):  # destroyed by its ttl alone, before anyone calls it again
        assert not sb._client.containers.list(all=True, filters={"label": f"org.hermetic.sandbox={sb.id}"})
    elif isinstance(sb, LocalSandbox):
        assert not sb.dir.exists()
    with pytest.raises(SandboxGone, match="ttl"):
        sb.run("echo again")
    sb.close()
