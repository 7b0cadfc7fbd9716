"""Background processes: spawn, poll, a rolling log, stdin writes, kill; and `attach`, which streams a
process's raw stdout as it comes (a program speaking a protocol on its stdio, like an MCP server)."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import subprocess
import threading
import time
from typing import Any, Callable

from . import procutil
from .output import clean
from .protocol import INVALID_PARAMS, NO_SUCH_PROCESS, RESOURCE_EXHAUSTED, RpcError

STDERR_TAIL = 8192
"""Bytes of a separate stderr kept for the caller to read when the process ends."""


class BackgroundProcess:
    def __init__(
        self,
        pid_name: str,
        command: str,
        cwd: str,
        env: dict[str, str],
        log_limit: int,
        separate_stderr: bool = False,
    ) -> None:
        self.id = pid_name
        self.command = command
        self.log_limit = log_limit
        self.started = time.time()
        self._log = bytearray()
        self._written = 0  # bytes of output ever produced; log offsets count from the start
        self._lock = threading.Lock()
        self._grown = threading.Condition(self._lock)
        self._finished = threading.Event()
        self.stderr_tail = bytearray()
        """With separate_stderr: the last bytes the process wrote to stderr (its stdout stays clean)."""
        try:
            self.proc = subprocess.Popen(
                ["bash", "-c", command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if separate_stderr else subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,
                preexec_fn=procutil.prefer_for_oom_kill,
            )
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.ENOMEM):
                raise RpcError(RESOURCE_EXHAUSTED, "cannot start process: %s" % exc.strerror) from exc
            raise RpcError(INVALID_PARAMS, "cannot start process: %s" % exc) from exc
        threading.Thread(target=self._drain, name="proc-" + pid_name, daemon=True).start()
        if separate_stderr:
            threading.Thread(target=self._drain_stderr, name="proc-err-" + pid_name, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            with self._lock:
                self._log += data
                self._written += len(data)
                if len(self._log) > self.log_limit:
                    del self._log[: len(self._log) - self.log_limit]
                self._grown.notify_all()
        self.proc.wait()
        with self._lock:
            self._finished.set()
            self._grown.notify_all()

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        while True:
            data = os.read(fd, 65536)
            if not data:
                return
            with self._lock:
                self.stderr_tail += data
                del self.stderr_tail[: max(0, len(self.stderr_tail) - STDERR_TAIL)]

    def attach(self, offset: int, emit: Callable[[bytes], None]) -> dict[str, Any]:
        """Send stdout from byte `offset` through `emit` as it arrives, until the process exits; then
        its status and the tail of its stderr. Bytes already dropped from the rolling log are skipped."""
        while True:
            with self._lock:
                while self._written == offset and not self._finished.is_set():
                    self._grown.wait()
                first = self._written - len(self._log)
                data = bytes(self._log[max(offset, first) - first :])
                offset = self._written
                finished = self._finished.is_set()
            if data:
                emit(data)
            if finished:
                status = self.status()
                with self._lock:
                    status["stderr"] = self.stderr_tail.decode("utf-8", "replace")
                return status

    def status(self) -> dict[str, Any]:
        code = self.proc.poll()
        return {
            "id": self.id,
            "pid": self.proc.pid,
            "command": self.command,
            "running": code is None,
            "exit_code": code,
            "log_bytes": self._written,
            "started": self.started,
        }

    def log(self, offset: int | None, tail: int | None) -> dict[str, Any]:
        with self._lock:
            first = self._written - len(self._log)  # offset of the oldest byte still kept
            start = first if offset is None else max(offset, first)
            data = bytes(self._log[start - first :])
            end = self._written
        dropped = start - offset if offset is not None and offset < first else 0
        text = clean(data)
        if tail is not None:
            text = "\n".join(text.splitlines()[-tail:])
        code = self.proc.poll()
        return {
            "text": text,
            "offset": end,
            "dropped_bytes": dropped,
            "running": code is None,
            "exit_code": code,
        }

    def wait(self, timeout: float) -> dict[str, Any]:
        self._finished.wait(timeout)
        return self.status()

    def write(self, data: str, eof: bool) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            if data:
                stdin.write(data.encode("utf-8", "surrogateescape"))
                stdin.flush()
            if eof:
                stdin.close()
        except (BrokenPipeError, ValueError) as exc:
            raise RpcError(NO_SUCH_PROCESS, "process %s no longer reads its stdin" % self.id) from exc

    def kill(self, sig: int, wait: float) -> dict[str, Any]:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        if not self._finished.wait(wait) and sig != signal.SIGKILL:
            procutil.kill_session(self.proc.pid)
            self._finished.wait(wait)
        return self.status()


class ProcessTable:
    def __init__(self, workspace: str, env: dict[str, str]) -> None:
        self._workspace = workspace
        self._env = env
        self._procs: dict[str, BackgroundProcess] = {}
        self._ids = itertools.count(1)

    def spawn(
        self,
        command: str,
        cwd: str | None,
        env: dict[str, str] | None,
        log_limit: int,
        separate_stderr: bool = False,
    ) -> dict[str, Any]:
        merged = dict(self._env)
        merged.update(env or {})
        proc = BackgroundProcess(
            "p%d" % next(self._ids), command, cwd or self._workspace, merged, log_limit, separate_stderr
        )
        self._procs[proc.id] = proc
        return proc.status()

    def get(self, proc_id: str) -> BackgroundProcess:
        proc = self._procs.get(proc_id)
        if proc is None:
            raise RpcError(NO_SUCH_PROCESS, "no background process %r" % proc_id)
        return proc

    def list(self) -> list:
        return [p.status() for p in self._procs.values()]

    def kill_all(self) -> None:
        for proc in self._procs.values():
            if proc.proc.poll() is None:
                procutil.kill_session(proc.proc.pid)
