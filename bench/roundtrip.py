"""Per-command round trip and create-to-first-command, for each backend and for the raw floors."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import docker

from backends import Backend, BackendUnavailable, SandboxSpec, create_backend

OUTPUT_100K = "head -c 100000 /dev/zero | tr '\\0' a"
END = b"__hermetic_bench_end__"


class PersistentBash:
    """The floor: one bash over a pipe, a marker echoed after each command."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin, self.proc.stdout.fileno()

    def run(self, command: str) -> bytes:
        self._in.write(command.encode() + b"; echo " + END + b"\n")
        buf = b""
        while not buf.endswith(END + b"\n"):
            buf += os.read(self._out, 262144)
        return buf

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def hermetic_figures(name: str, n: int) -> dict[str, Callable[[], object]] | None:
    try:
        backend = create_backend(name)
    except BackendUnavailable as exc:
        print(f"skipping {name}: {exc}")
        return None
    return backend_figures(backend)


def backend_figures(backend: Backend) -> dict[str, Callable[[], object]]:
    name = backend.name
    spec = SandboxSpec(output_limit=200_000, network="full" if name == "ssh" else "none")
    sandbox = backend.create(spec)

    def create_first() -> None:
        with backend.create(spec) as sb:
            sb.run("true")

    return {
        f"{name}: `true` round trip": lambda: sandbox.run("true"),
        f"{name}: 100 KB output": lambda: sandbox.run(OUTPUT_100K),
        f"{name}: create to first command": create_first,
        "_close": sandbox.close,
    }


def ssh_figures() -> dict[str, Callable[[], object]] | None:
    """The ssh backend against a throwaway sshd on 127.0.0.1, and the OpenSSH client's floors."""
    from tests.sshd import SSHDUnavailable, start_sshd

    try:
        server = start_sshd()
    except SSHDUnavailable as exc:
        print(f"skipping ssh: {exc}")
        return None
    figures = backend_figures(create_backend("ssh", server.config()))
    close_sandbox = figures.pop("_close")
    bash = PersistentBash(server.ssh_argv("bash"))

    def close() -> None:
        close_sandbox()
        bash.close()
        server.stop()

    return {
        **figures,
        "floor: fresh `ssh host true` (OpenSSH client)": lambda: subprocess.run(
            server.ssh_argv("true"), check=True
        ),
        "floor: persistent bash over one ssh session": lambda: bash.run("true"),
        "_close": close,
    }


def docker_floors() -> dict[str, Callable[[], object]]:
    client = docker.from_env()
    image = SandboxSpec().image
    container = client.containers.run(
        image, ["sleep", "infinity"], detach=True, init=True, network_mode="none"
    )
    cid = container.id
    bash = PersistentBash(["docker", "exec", "-i", cid, "bash"])

    def run_and_exec() -> None:
        c = client.containers.run(image, ["sleep", "infinity"], detach=True, init=True, network_mode="none")
        c.exec_run(["true"])
        c.remove(force=True)

    def close() -> None:
        bash.close()
        container.remove(force=True)

    return {
        "floor: fresh `docker exec` (CLI)": lambda: subprocess.run(
            ["docker", "exec", cid, "true"], check=True
        ),
        "floor: fresh exec (SDK)": lambda: container.exec_run(["true"]),
        "floor: persistent bash over one exec stream": lambda: bash.run("true"),
        "floor: `docker run` + first exec": run_and_exec,
        "_close": close,
    }


def collect(backends: list[str], n: int) -> dict[str, list[float]]:
    from .stats import sample

    results: dict[str, list[float]] = {}
    local_bash = PersistentBash(["bash"])
    results["floor: persistent bash over a pipe"] = sample(lambda: local_bash.run("true"), n)
    results["floor: persistent bash, 100 KB output"] = sample(
        lambda: local_bash.run(OUTPUT_100K), max(n // 5, 3)
    )
    local_bash.close()
    groups = [hermetic_figures(name, n) for name in backends if name != "ssh"]
    if "ssh" in backends:
        groups.append(ssh_figures())
    if "docker" in backends:
        groups.append(docker_floors())
    for group in groups:
        if group is None:
            continue
        close = group.pop("_close")
        for label, fn in group.items():
            slow = "create" in label or "docker run" in label or "fresh" in label
            results[label] = sample(
                fn, max(n // 50, 3) if slow else (max(n // 5, 3) if "100 KB" in label else n)
            )
        close()
    return results
