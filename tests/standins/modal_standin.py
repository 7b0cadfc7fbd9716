"""A stand-in for the part of `modal.Sandbox` the Modal backend uses, running local processes.

No Modal service is reachable here, so this takes its place, and only its place: the runtime really runs
(a local subprocess), so the protocol runs end to end through the backend's real transport and channel.
It keeps the Modal semantics the adapter depends on:
- `create` and `exec` accept exactly the keyword arguments of the installed SDK's signatures, refuse the
  deprecated ones, and refuse `block_network` together with an allowlist, as Modal does;
- `create`'s command is the sandbox's lifetime (the sandbox ends when it exits), `timeout` ends the sandbox;
- `exec(timeout=...)` kills the exec'd process at the deadline, as Modal's exec timeout does;
- stdin is a buffered StreamWriter: `write` appends, `drain` sends the buffer and clears it afterwards,
  `write_eof` closes at the next drain; more than 16 MiB without a drain raises BufferError;
- stdout/stderr with `text=False` yield raw bytes chunks as they arrive, in no line discipline.
What it cannot be, it is not: no gVisor, no network policy, no cpu/memory/pids limits, no other user; the
filesystem is the host's, except that the workdir (e.g. /workspace) is a private temp dir, bound there by
bubblewrap. Tests needing those properties skip on it.
"""

from __future__ import annotations

import atexit
import inspect
import os
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import modal
from modal.exception import InvalidError, SandboxTerminatedError

from backends.local import spawn

CREATE_PARAMS = set(inspect.signature(modal.Sandbox.create).parameters) - {"args"}
EXEC_PARAMS = set(inspect.signature(modal.Sandbox.exec).parameters) - {"self", "args"}
DEPRECATED = {"cidr_allowlist", "environment_name", "pty_info", "_pty_info"}
STDIN_BUFFER_LIMIT = 16 * 1024 * 1024
# What a Debian image's environment gives every process before create's and exec's env are added.
IMAGE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}
SNAPSHOTS = Path(tempfile.mkdtemp(prefix="modal-standin-snapshots-"))  # gone when the test run ends
atexit.register(shutil.rmtree, SNAPSHOTS, ignore_errors=True)
_FROM_ID = re.compile(r"^Image\.from_id\('(im-[^']+)'\)$")


class FakeStreamWriter:
    """Modal's StreamWriter over a pipe: buffered until drain, with the same clear-after-send order."""

    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe
        self._buffer = bytearray()
        self._eof = False

    def write(self, data: bytes | bytearray | memoryview | str) -> None:
        if self._eof:
            raise ValueError("Stdin is closed. Cannot write to it.")
        data = data.encode() if isinstance(data, str) else bytes(data)
        if len(self._buffer) + len(data) > STDIN_BUFFER_LIMIT:
            raise BufferError("Buffer size exceed limit. Call drain to flush the buffer.")
        self._buffer.extend(data)

    def write_eof(self) -> None:
        self._eof = True

    def drain(self) -> None:
        data = bytes(self._buffer)
        if data:
            self._pipe.write(data)  # the network round trip, in Modal: other threads run meanwhile
            self._pipe.flush()
        self._buffer.clear()
        if self._eof:
            self._pipe.close()


class FakeStreamReader:
    """Iterable of the raw bytes chunks a pipe delivers, as Modal's reader yields with text=False."""

    def __init__(self, pipe: Any) -> None:
        self._fd = pipe.fileno()
        self._pipe = pipe

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            yield chunk


class FakeProcess:
    """What `exec` returns: Modal's ContainerProcess subset."""

    def __init__(self, popen: subprocess.Popen[bytes], timeout: int | None) -> None:
        self.popen = popen
        self.stdin = FakeStreamWriter(popen.stdin)
        self.stdout = FakeStreamReader(popen.stdout)
        self.stderr = FakeStreamReader(popen.stderr)
        self._timer: threading.Timer | None = None
        if timeout:
            self._timer = threading.Timer(timeout, popen.kill)
            self._timer.daemon = True
            self._timer.start()

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self) -> int:
        return self.popen.wait()


class FakeImage:
    def __init__(self, object_id: str) -> None:
        self.object_id = object_id


class FakeSandbox:
    """`modal.Sandbox` as far as the backend uses it; `created` lists every sandbox for tests to inspect."""

    created: ClassVar[list[FakeSandbox]] = []

    def __init__(self, args: tuple[str, ...], kwargs: dict[str, Any]) -> None:
        self.create_args = args
        self.create_kwargs = kwargs
        self.exec_calls: list[tuple[tuple[str, ...], dict[str, Any]]] = []
        self.object_id = "sb-standin-" + uuid.uuid4().hex[:12]
        self.root = Path(tempfile.mkdtemp(prefix="modal-standin-"))
        self.tmp = Path(tempfile.mkdtemp(prefix="modal-standin-tmp-"))  # the container's own /tmp
        self.workdir = kwargs.get("workdir") or "/"
        self.processes: list[FakeProcess] = []
        self._terminated: int | None = None
        self._restore(kwargs.get("image"))
        self.entrypoint = self._spawn(args or ("sleep", "infinity"), {}, None)
        self._timer = threading.Timer(kwargs.get("timeout") or 300, self.terminate)
        self._timer.daemon = True
        self._timer.start()

    @classmethod
    def create(cls, *args: str, **kwargs: Any) -> FakeSandbox:
        _check_kwargs("Sandbox.create", kwargs, CREATE_PARAMS)
        if kwargs.get("block_network") and (
            kwargs.get("outbound_cidr_allowlist") is not None
            or kwargs.get("outbound_domain_allowlist") is not None
        ):
            raise InvalidError("an outbound allowlist cannot be used when `block_network` is enabled")
        sandbox = cls(args, kwargs)
        cls.created.append(sandbox)
        return sandbox

    def exec(self, *args: str, **kwargs: Any) -> FakeProcess:
        _check_kwargs("Sandbox.exec", kwargs, EXEC_PARAMS)
        if kwargs.get("text", True):
            raise NotImplementedError("the stand-in serves bytes only (text=False), as the backend must ask")
        if self.poll() is not None:
            raise SandboxTerminatedError(f"sandbox {self.object_id} has finished")
        self.exec_calls.append((args, kwargs))
        process = self._spawn(args, kwargs.get("env") or {}, kwargs.get("workdir"), kwargs.get("timeout"))
        self.processes.append(process)
        return process

    def poll(self) -> int | None:
        if self._terminated is not None:
            return self._terminated
        return self.entrypoint.poll()

    def terminate(self, *, wait: bool = False) -> int | None:
        if self._terminated is None:
            self._terminated = 137  # like a container killed with SIGKILL
            self._timer.cancel()
            self.kill_processes()
            shutil.rmtree(self.root, ignore_errors=True)
            shutil.rmtree(self.tmp, ignore_errors=True)
        return self._terminated if wait else None

    def snapshot_filesystem(self, timeout: int = 55, *, ttl: int | None = None) -> FakeImage:
        """The workdir as a tar; its id restores it when passed back as `modal.Image.from_id(id)`."""
        image_id = "im-standin-" + uuid.uuid4().hex[:12]
        with tarfile.open(SNAPSHOTS / f"{image_id}.tar", "w") as archive:
            archive.add(self.root, arcname=".")
        return FakeImage(image_id)

    # -- test controls: not Modal's API ------------------------------------------------------------

    def kill_processes(self) -> None:
        """SIGKILL every process of this sandbox (found by the MODAL_SANDBOX_ID in its environment)."""
        marker = f"MODAL_SANDBOX_ID={self.object_id}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                continue
        for process in [self.entrypoint, *self.processes]:
            if process.popen.poll() is None:
                process.popen.kill()
            process.popen.wait()

    def kill_exec(self, process: FakeProcess) -> None:
        """The exec'd process dies (OOM, a crash) while the sandbox lives on."""
        process.popen.kill()
        process.popen.wait()

    # -- internals ---------------------------------------------------------------------------------

    def _spawn(
        self, args: tuple[str, ...], env: dict[str, Any], workdir: str | None, timeout: int | None = None
    ) -> FakeProcess:
        merged = {**IMAGE_ENV, **(self.create_kwargs.get("env") or {}), **env}
        merged = {k: str(v) for k, v in merged.items() if v is not None}
        merged["MODAL_SANDBOX_ID"] = self.object_id  # real Modal sets it too; kill_processes finds by it
        popen = spawn(  # bwrap --die-with-parent: from a thread that outlives the caller's
            [*self._view(workdir or self.workdir), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=merged,
            start_new_session=True,
        )
        return FakeProcess(popen, timeout)

    def _view(self, cwd: str) -> list[str]:
        """bwrap: the host's filesystem, a /tmp of its own (what the runtime unpacks there goes with the
        sandbox, as in a container) and the private root dir at the workdir; nothing else isolated.

        Each top-level entry is bound on its own (into bwrap's tmpfs root), so the workdir's mount point
        is made there and never on the host; the pid namespace makes killing bwrap kill the exec's tree.
        """
        view = ["bwrap", "--die-with-parent", "--unshare-pid", "--proc", "/proc"]
        for entry in sorted(os.listdir("/")):
            path = "/" + entry
            if entry == "proc" or path == self.workdir:
                continue
            if path == "/tmp":
                view += ["--bind", str(self.tmp), path]
                continue
            if os.path.islink(path):
                view += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                view += ["--dev-bind", path, path]
        if self.workdir != "/":
            view += ["--bind", str(self.root), self.workdir]
        return [*view, "--chdir", cwd, "--"]

    def _restore(self, image: Any) -> None:
        match = _FROM_ID.match(repr(image)) if image is not None else None
        if match and (SNAPSHOTS / f"{match.group(1)}.tar").exists():
            with tarfile.open(SNAPSHOTS / f"{match.group(1)}.tar") as archive:
                archive.extractall(self.root, filter="data")


def _check_kwargs(what: str, kwargs: dict[str, Any], allowed: set[str]) -> None:
    unknown = set(kwargs) - allowed
    if unknown:
        raise TypeError(f"{what}() got unexpected keyword arguments {sorted(unknown)}")
    deprecated = set(kwargs) & DEPRECATED
    if deprecated:
        raise TypeError(f"{what}(): {sorted(deprecated)} are deprecated in modal {modal.__version__}")


def lookup_app(name: str) -> str:
    """Stands in for `modal.App.lookup(name, create_if_missing=True)`."""
    return f"app:{name}"
