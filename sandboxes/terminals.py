"""Interactive terminals: a program on a PTY of its own (a REPL, an editor, `top`, a password prompt),
typed into and read back as raw terminal bytes; the caller renders the screen (a VT emulator).

A read waits on the output itself: for the first byte past the caller's offset, then until the output
has been quiet for `settle` seconds (or the program ends, or the timeout passes). What to wait for on
the screen is the caller's to judge: it reads again, and each read blocks until there is more.
The runtime keeps the last LOG_LIMIT bytes, so a caller that lost its screen can rebuild it."""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import itertools
import os
import struct
import subprocess
import termios
import threading
import time
from typing import Any, Callable

from . import procutil
from .bash import write_all
from .protocol import INVALID_PARAMS, NO_SUCH_PROCESS, RESOURCE_EXHAUSTED, RpcError

LOG_LIMIT = 1 << 20
DEFAULT_SETTLE = 0.05
MAX_ROWS, MAX_COLS = 500, 1000
TERMINAL_ENV = {"TERM": "xterm-256color", "COLORTERM": "", "LINES": "", "COLUMNS": ""}


def _winsize(fd: int, rows: int, cols: int) -> None:
    if not (1 <= rows <= MAX_ROWS and 1 <= cols <= MAX_COLS):
        raise RpcError(INVALID_PARAMS, "a terminal is 1-%d rows by 1-%d columns" % (MAX_ROWS, MAX_COLS))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Terminal:
    def __init__(self, tid: str, command: str, cwd: str, env: dict[str, str], rows: int, cols: int) -> None:
        self.id = tid
        self.command = command
        self.started = time.time()
        self.rows, self.cols = rows, cols
        self._log = bytearray()
        self._written = 0  # bytes ever produced; offsets count from the start
        self._cond = threading.Condition()
        self._ended = False
        master, slave = os.openpty()
        try:
            _winsize(slave, rows, cols)
            self.proc = subprocess.Popen(
                ["bash", "-c", command],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=cwd if os.path.isdir(cwd) else None,
                env={k: v for k, v in {**env, **TERMINAL_ENV}.items() if v},
                start_new_session=True,
                preexec_fn=_take_terminal,
            )
        except OSError as exc:
            os.close(master)
            if exc.errno in (errno.EAGAIN, errno.ENOMEM):
                raise RpcError(RESOURCE_EXHAUSTED, "cannot start terminal: %s" % exc.strerror) from exc
            raise RpcError(INVALID_PARAMS, "cannot start terminal: %s" % exc) from exc
        finally:
            os.close(slave)  # the program holds it; its last close hangs the master up (EIO: ended)
        self._master = master
        threading.Thread(target=self._drain, name="term-" + tid, daemon=True).start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # EIO: every holder of the slave closed it
                data = b""
            with self._cond:
                if not data:
                    break
                self._log += data
                self._written += len(data)
                del self._log[: max(0, len(self._log) - LOG_LIMIT)]
                self._cond.notify_all()
        self.proc.wait()
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def read(self, offset: int, settle: float, timeout: float, until_exit: bool) -> dict[str, Any]:
        """The output past `offset` once it settles (see the module's docstring)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                now = time.monotonic()
                if self._ended or now >= deadline:
                    break
                if self._written > offset and not until_exit:
                    seen = self._written
                    self._cond.wait(min(settle, deadline - now))
                    if self._written == seen:
                        break  # quiet for `settle` seconds: the screen has settled
                    continue
                self._cond.wait(deadline - now)
            return self._result(offset)

    def _since(self, offset: int) -> bytes:
        first = self._written - len(self._log)
        return bytes(self._log[max(offset, first) - first :])

    def _result(self, offset: int) -> dict[str, Any]:
        first = self._written - len(self._log)
        code = self.proc.poll() if self._ended else None
        return {
            "id": self.id,
            "data": base64.b64encode(self._since(offset)).decode("ascii"),
            "offset": self._written,
            "dropped_bytes": max(0, first - offset),
            "running": not self._ended,
            "exit_code": code,
            "rows": self.rows,
            "cols": self.cols,
        }

    def write(self, data: str) -> None:
        if self._ended:
            raise RpcError(NO_SUCH_PROCESS, "terminal %s has ended" % self.id)
        write_all(self._master, data)

    def resize(self, rows: int, cols: int) -> None:
        """New window size; the kernel sends SIGWINCH to the terminal's foreground process group."""
        if not self._ended:
            _winsize(self._master, rows, cols)
        self.rows, self.cols = rows, cols

    def close(self) -> None:
        procutil.kill_session(self.proc.pid)
        with self._cond:
            if self._cond.wait_for(lambda: self._ended, timeout=5):
                os.close(self._master)  # only once the reader is done with it: no read on a reused fd

    def status(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "pid": self.proc.pid,
            "command": self.command,
            "running": not self._ended,
            "exit_code": self.proc.poll() if self._ended else None,
            "rows": self.rows,
            "cols": self.cols,
            "started": self.started,
        }


def _take_terminal() -> None:
    """In the child, after setsid: stdin (the slave) becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    procutil.prefer_for_oom_kill()


class TerminalTable:
    """The runtime's interactive terminals by id (t1, t2, ...): `term.*` methods."""

    def __init__(self, workspace: str, env: dict[str, str]) -> None:
        self._workspace = workspace
        self._env = env
        self._terms: dict[str, Terminal] = {}
        self._ids = itertools.count(1)

    def get(self, tid: str) -> Terminal:
        term = self._terms.get(tid)
        if term is None:
            raise RpcError(NO_SUCH_PROCESS, "no terminal %r" % tid)
        return term

    def open(
        self,
        req: Any,
        command: str,
        rows: int = 24,
        cols: int = 80,
        cwd: str | None = None,
        settle: float = DEFAULT_SETTLE,
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        if not isinstance(command, str) or not command.strip():
            raise RpcError(INVALID_PARAMS, "command must be a non-empty string")
        term = Terminal(
            "t%d" % next(self._ids), command, cwd or self._workspace, self._env, int(rows), int(cols)
        )
        self._terms[term.id] = term
        return term.read(0, float(settle), float(timeout), False)

    def send(
        self,
        req: Any,
        id: str,
        data: str = "",
        offset: int = 0,
        settle: float = DEFAULT_SETTLE,
        timeout: float = 10.0,
        until_exit: bool = False,
    ) -> dict[str, Any]:
        """Type `data` (may be empty: just read), then read past `offset` as `read` does."""
        term = self.get(id)
        if data:
            term.write(data)
        return term.read(int(offset), float(settle), float(timeout), bool(until_exit))

    def resize(self, req: Any, id: str, rows: int, cols: int) -> dict[str, Any]:
        term = self.get(id)
        term.resize(int(rows), int(cols))
        return term.status()

    def close(self, req: Any, id: str) -> dict[str, Any]:
        term = self._terms.pop(id, None)
        if term is None:
            raise RpcError(NO_SUCH_PROCESS, "no terminal %r" % id)
        term.close()
        return term.status()

    def close_all(self) -> None:
        for tid in list(self._terms):
            with contextlib.suppress(RpcError):
                self.close(None, tid)

    def methods(self) -> dict[str, Callable[..., Any]]:
        return {
            "term.open": self.open,
            "term.send": self.send,
            "term.resize": self.resize,
            "term.close": self.close,
            "term.list": lambda req: {"terminals": [t.status() for t in self._terms.values()]},
        }
