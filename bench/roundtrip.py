"""Per command: round trip of `true` and of 100 KB of output, create-to-first-command and a 1 MB file
written and read back, for each of our backends; and the raw floors the same machine allows."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import docker
from docker.models.containers import Container

from backends import Backend, BackendUnavailable, SandboxSpec, create_backend

from .stats import Results, sample

OUTPUT_100K = "head -c 100000 /dev/zero | tr '\\0' a"
FILE_1MB = ("x" * 99 + "\n") * 10_000
END = b"__hermetic_bench_end__"

Figures = dict[str, Callable[[], object]]


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
            buf += os.read(self._out, 65536)
        return buf

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def backend_figures(backend: Backend, image: str) -> tuple[Figures, Callable[[], None]]:
    """Our figures for one backend, and what closes the sandbox they share."""
    label = f"hermetic {backend.name}"
    spec = SandboxSpec(image=image, output_limit=200_000, network="full" if backend.name == "ssh" else "none")
    sandbox = backend.create(spec)

    def create_first() -> None:
        with backend.create(spec) as sb:
            sb.run("true")

    def file_write_read() -> None:
        sandbox.call("fs.write", {"path": "bench-1mb.txt", "content": FILE_1MB})
        got = sandbox.call("fs.read", {"path": "bench-1mb.txt", "limit": 10_000, "numbered": False})
        assert len(got["content"]) + 1 == len(FILE_1MB), "the file came back different"

    return {
        f"{label}: `true` round trip": lambda: sandbox.run("true"),
        f"{label}: 100 KB output": lambda: sandbox.run(OUTPUT_100K),
        f"{label}: create to first command": create_first,
        f"{label}: 1 MB file write+read": file_write_read,
    }, sandbox.close


def ssh_figures(image: str) -> tuple[Figures, Callable[[], None]] | None:
    """The ssh backend against a throwaway sshd on 127.0.0.1, and the OpenSSH client's floors."""
    from sshd import SSHDUnavailable, start_sshd

    try:
        server = start_sshd()
    except SSHDUnavailable as exc:
        print(f"skipping ssh: {exc}")
        return None
    figures, close_sandbox = backend_figures(create_backend("ssh", server.config()), image)
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
    }, close


def docker_floors(image: str) -> tuple[Figures, Callable[[], None]]:
    client = docker.from_env()

    def start() -> Container:
        return client.containers.run(
            image, ["sleep", "infinity"], detach=True, init=True, network_mode="none"
        )

    container = start()
    cid = container.id
    assert cid is not None
    bash = PersistentBash(["docker", "exec", "-i", cid, "bash"])

    def run_and_exec() -> None:
        c = start()
        c.exec_run(["true"])
        c.remove(force=True)

    def close() -> None:
        bash.close()
        container.remove(force=True)

    return {
        "floor: fresh `docker exec` (CLI)": lambda: subprocess.run(
            ["docker", "exec", cid, "true"], check=True
        ),
        "floor: fresh exec (docker SDK)": lambda: container.exec_run(["true"]),
        "floor: persistent bash over one docker exec stream": lambda: bash.run("true"),
        "floor: persistent bash over one docker exec stream, 100 KB": lambda: bash.run(OUTPUT_100K),
        "floor: `docker run` + first exec": run_and_exec,
    }, close


def iterations(label: str, n: int) -> int:
    """Slow figures get fewer samples; the 1 MB file as many as the peers' (runner_kit.counts)."""
    if any(word in label for word in ("create", "docker run", "fresh")):
        return max(n // 50, 3)
    return max(n // 5, 3) if "100 KB" in label or "1 MB" in label else n


def collect(backends: list[str], n: int, image: str) -> Results:
    results: Results = {}
    local_bash = PersistentBash(["bash"])
    groups: list[tuple[Figures, Callable[[], None]] | None] = [
        (
            {
                "floor: persistent bash over a pipe": lambda: local_bash.run("true"),
                "floor: persistent bash over a pipe, 100 KB": lambda: local_bash.run(OUTPUT_100K),
                "floor: fresh `bash -c true`": lambda: subprocess.run(["bash", "-c", "true"], check=True),
            },
            local_bash.close,
        )
    ]
    for name in backends:
        if name == "ssh":
            groups.append(ssh_figures(image))
            continue
        try:
            groups.append(backend_figures(create_backend(name), image))
        except BackendUnavailable as exc:
            print(f"skipping {name}: {exc}")
    if "docker" in backends:
        groups.append(docker_floors(image))
    for group in groups:
        if group is None:
            continue
        figures, close = group
        try:
            for label, fn in figures.items():
                results[label] = sample(fn, iterations(label, n))
        finally:
            close()
    return results
