"""Named persistent bash sessions: state survives between runs, commands can be timed out.

Each session is an interactive bash whose controlling terminal is a PTY (job control, ^C,
REPLs), but which reads its command lines from a pipe and writes to a pipe: a PTY round trip
costs ~0.5 ms here, a pipe ~0.05 ms. A run writes the command to a file and sends one short
line: set the run's token, then source the file with stdin from /dev/null (or, for an
interactive run, all three streams on the PTY). bash's PROMPT_COMMAND prints the token, `$?`
and `$PWD` when the command ends, so the end (and the cwd) is found on the stream itself,
even after an interrupt, with no polling. While a run is waited on, the waiting request reads
the output itself; between runs a reader thread drains it (see _read_loop)."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import termios
import threading
import time
from typing import Any, Callable

from . import procutil
from .bash import RC, poke, read_some, start_bash, write_all
from .output import OutputBuffer, StreamBatcher, clean
from .protocol import RESOURCE_EXHAUSTED, SESSION_BUSY, SESSION_IDLE, RpcError

_SENTINEL_TAIL = 4200  # longest possible marker: \x1e token : status : $PWD (up to PATH_MAX) \x1e
_MAX_PENDING = 4 << 20  # backpressure: the reader stops draining the PTY past this
_IDLE_KEEP = 64 << 10  # output produced between runs that is kept for the next one
# Escalation when a run times out or is interrupted: (signal for the command's group, grace).
_ESCALATION = ((signal.SIGINT, 1.0), (signal.SIGKILL, 1.0), (signal.SIGKILL, 2.0))

StreamFn = Callable[[str], None]


class _Run:
    """One command in flight: its token, and how far its output has been scanned."""

    def __init__(self, token: str, interactive: bool) -> None:
        self.token = token
        self.interactive = interactive
        self.marker = b"\x1e" + token.encode() + b":"
        self.carry = b""
        self.started = time.monotonic()
        self.finished = threading.Event()
        self.groups: set = set()  # process groups signalled on its behalf


class ShellSession:
    def __init__(self, name: str, cwd: str, env: dict[str, str]) -> None:
        self.name = name
        self._cwd = cwd
        self._env = env
        self._cond = threading.Condition()
        self._dir = tempfile.mkdtemp(prefix="hermetic-shell-")
        with open(os.path.join(self._dir, "rc"), "w") as fh:
            fh.write(RC)
        self._cmd_path = os.path.join(self._dir, "cmd")
        self._cmd_file = os.open(self._cmd_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._cmd_size = 0
        self._run: _Run | None = None
        self._pumping = False  # a request is reading the output itself (see _pump)
        # Wakes a pump when bash dies or the session closes (a pipe: os.eventfd needs Python 3.10).
        self._wake, self._waker = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._exit_code = 0
        self._pwd = ""  # bash's $PWD at the end of the last run, from its marker
        # Run tokens: a per-session random prefix and a counter (one urandom call, not one per run).
        self._token_prefix, self._token_count = secrets.token_hex(4), itertools.count()
        self._spawn(cwd)

    # -- process ---------------------------------------------------------------------------

    def _spawn(self, cwd: str) -> None:
        bash = start_bash(os.path.join(self._dir, "rc"), cwd, self._env)
        self.proc, master, slave, self._tty_attrs = bash.proc, bash.master, bash.slave, bash.tty_attrs
        cmd_w, out_r = bash.cmd, bash.out
        for fd in (master, out_r):  # two threads may poll them; only one reads (see _read_loop)
            os.set_blocking(fd, False)
        # The runtime keeps the slave open for the session's life: with no slave fd open anywhere
        # (a window while bash starts) the master would hang up and bash would get SIGHUP.
        self._slave = slave
        self._master = master
        self._cmd = cmd_w
        self._pending = bytearray()
        self._alive = True
        self._tty_dirty = False
        generation = (master, out_r)
        self._generation: tuple | None = generation
        self._epoll = select.epoll()
        for fd in generation:
            self._epoll.register(fd, select.EPOLLIN)
        self._open_fds = set(generation)
        threading.Thread(
            target=self._read_loop,
            args=(generation, self._epoll, self._open_fds),
            name="out-" + self.name,
            daemon=True,
        ).start()
        threading.Thread(
            target=self._watch, args=(self.proc, generation), name="wait-" + self.name, daemon=True
        ).start()
        self._run = _Run("init", False)
        if self._pump(time.monotonic() + 10.0, None, None, None, OutputBuffer(1000)) != "done":
            self._terminate()
            raise RpcError(RESOURCE_EXHAUSTED, "bash did not start in the shell session %r" % self.name)
        self._run = None

    def _read_loop(self, generation: tuple, epoll: select.epoll, open_fds: set) -> None:
        """Between runs, drain bash's output pipe and the PTY into the pending buffer. While a
        request pumps a run it reads them itself: it switches them off in this thread's epoll
        first (which does not wake it), so the reply needs no thread handoff and this thread does
        not even wake up. Reads and closes happen under the lock, so the two never overlap."""
        try:
            while open_fds:
                ready = epoll.poll()
                with self._cond:
                    if self._pumping and self._generation is generation:
                        continue  # woken just before a pump switched the fds off
                    for fd, _ in ready:
                        data = read_some(fd) if fd in open_fds else None
                        if data is None:
                            continue
                        if not data:
                            epoll.unregister(fd)
                            open_fds.discard(fd)
                            os.close(fd)  # only this thread closes them: no read on a reused fd number
                            continue
                        if self._generation is not generation:
                            continue
                        self._pending += data
                        if self._run is None and len(self._pending) > _IDLE_KEEP:
                            del self._pending[: len(self._pending) - _IDLE_KEEP]
                    while len(self._pending) > _MAX_PENDING and self._generation is generation:
                        self._cond.wait()
        finally:
            epoll.close()

    def _watch(self, proc: subprocess.Popen, generation: tuple) -> None:
        proc.wait()
        with self._cond:
            if self._generation is generation:
                self._alive = False
                poke(self._waker)

    def _terminate(self) -> None:
        """Kill bash and everything still in its session; forget the PTY."""
        procutil.kill_session(self.proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        with self._cond:
            self._generation = None
            self._alive = False
            poke(self._waker)
        os.close(self._cmd)
        os.close(self._slave)  # the reader thread then sees the PTY hang up and closes the master

    def _new_token(self) -> str:
        return "%s%x" % (self._token_prefix, next(self._token_count))

    @property
    def cwd(self) -> str:
        try:
            return os.readlink("/proc/%d/cwd" % self.proc.pid)
        except OSError:
            return self._cwd

    def capture(self) -> tuple[str, dict[str, str]] | None:
        """The session's cwd and exported variables, read by a run of `env -0` in the session
        itself (its own variables are nowhere else); None while a command runs."""
        if self._run is not None or not self._alive:
            return None
        path = os.path.join(self._dir, "state")
        try:
            result = self.run('command env -0 >"%s"' % path, 10.0, 1000)
        except RpcError:  # became busy meanwhile
            return None
        if result.get("exit_code") != 0:
            return None
        with open(path, "rb") as fh:
            raw = fh.read()
        os.unlink(path)
        env = {}
        for entry in raw.split(b"\0"):
            key, sep, value = entry.decode("utf-8", "surrogateescape").partition("=")
            if sep and not key.startswith("__hm"):
                env[key] = value
        return result["cwd"], env

    # -- runs ------------------------------------------------------------------------------

    def run(
        self,
        command: str,
        timeout: float,
        limit: int,
        stdin: str | None = None,
        interactive: bool = False,
        expect: str | None = None,
        idle: float | None = None,
        stream: StreamFn | None = None,
    ) -> dict[str, Any]:
        with self._cond:
            if self._run is not None:
                raise RpcError(
                    SESSION_BUSY,
                    "shell session %r is still running a command; "
                    "use shell.send, shell.interrupt or another session" % self.name,
                )
            run = self._run = _Run(self._new_token(), interactive)
            earlier = bytes(self._pending)  # what background jobs wrote since the last run ended
            self._pending.clear()
        reset = False
        if not self._alive:
            self._restart()
            reset = True
        self._store_command(command)
        line = "__hm_t=%s; . %s </dev/null\n"
        if stdin is not None:
            stdin_path = os.path.join(self._dir, "stdin")
            with open(stdin_path, "w", encoding="utf-8") as fh:
                fh.write(stdin)
            line = "__hm_t=%s; . %s <" + stdin_path + "\n"
        elif interactive:
            line = "__hm_t=%s; __hm_y=1; . %s </dev/tty >/dev/tty 2>&1\n"
        if self._tty_dirty:
            self._restore_tty()
        self._tty_dirty = interactive
        write_all(self._cmd, line % (run.token, self._cmd_path))
        result = self._wait(run, timeout, limit, expect, idle if interactive else None, stream)
        result["session_reset"] = reset or result.get("session_reset", False)
        if earlier:
            result["background_output"] = clean(earlier)[-limit:]
        return result

    def send(
        self,
        text: str,
        timeout: float,
        limit: int,
        expect: str | None,
        idle: float | None,
        stream: StreamFn | None,
    ) -> dict[str, Any]:
        run = self._run
        if run is None or not run.interactive:
            raise RpcError(SESSION_IDLE, "shell session %r has no interactive command to send to" % self.name)
        if text:
            write_all(self._master, text)
        return self._wait(run, timeout, limit, expect, idle, stream)

    def interrupt(self, limit: int) -> dict[str, Any]:
        """^C for the running command. Returns its outcome unless another request is waiting on it."""
        run = self._run
        if run is None:
            return {"signalled": False}
        if self._pumping:
            # Another request waits on the run. A SIGINT can land while bash is between two
            # commands of the run and be lost, so repeat it until the run ends.
            for _ in range(10):
                run.groups.add(self._signal(signal.SIGINT))
                if run.finished.wait(0.3):
                    break
            return {"signalled": True}
        run.groups.add(self._signal(signal.SIGINT))
        result = self._wait(run, 2.0, limit, None, None, None)
        result["signalled"] = True
        return result

    def _wait(
        self,
        run: _Run,
        timeout: float,
        limit: int,
        expect: str | None,
        idle: float | None,
        stream: StreamFn | None,
    ) -> dict[str, Any]:
        out = OutputBuffer(limit)
        pattern = re.compile(expect) if expect else None
        timed_out = reset = False
        outcome = self._pump(time.monotonic() + timeout, idle, pattern, stream, out)
        if outcome == "deadline" and not run.interactive:
            timed_out = True
            for sig, grace in _ESCALATION:
                run.groups.add(self._signal(sig))
                outcome = self._pump(time.monotonic() + grace, None, None, stream, out)
                if outcome in ("done", "dead"):
                    break
            else:
                self._restart()
                reset = True
                outcome = "done"
                self._exit_code = -1
        text, truncated = out.result()
        result: dict[str, Any] = {
            "output": text,
            "truncated": truncated,
            "timed_out": timed_out,
            "running": outcome not in ("done", "dead"),
            "session_reset": reset,
        }
        if outcome in ("done", "dead"):
            killed = run.groups - {self.proc.pid}
            for group in killed:  # what is left of a killed command's group
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)
            if killed and outcome == "done":
                self._settle(run, killed, out)
            if outcome == "dead":
                self._exit_code = self.proc.wait()
                result["session_ended"] = True
            result["exit_code"] = self._exit_code
            result["cwd"] = self._pwd or self.cwd
            result["duration_ms"] = round((time.monotonic() - run.started) * 1000, 2)
            with self._cond:
                self._run = None
            run.finished.set()
        return result

    def _settle(self, run: _Run, groups: set, out: OutputBuffer) -> None:
        """After killing a command: wait (bounded) until its process groups are gone, then pass a
        no-op through bash, so whatever the dying processes wrote lands in this run's output and
        not in the next one's. Only on the timeout/interrupt path, hence the short sleeps."""
        deadline = time.monotonic() + 2.0
        for group in groups:
            while time.monotonic() < deadline:
                try:
                    os.killpg(group, 0)
                except OSError:
                    break
                time.sleep(0.01)
        code, run.token = self._exit_code, self._new_token()
        run.marker, run.carry = b"\x1e" + run.token.encode() + b":", b""
        write_all(self._cmd, "__hm_t=%s; :\n" % run.token)
        self._pump(time.monotonic() + 2.0, None, None, None, out)
        self._exit_code = code

    def _pump(
        self,
        deadline: float,
        idle: float | None,
        pattern: re.Pattern[str] | None,
        stream: StreamFn | None,
        out: OutputBuffer,
    ) -> str:
        """Move output into `out` until the run ends ('done'), bash dies ('dead'), the pattern shows
        ('expect'), output pauses for `idle` seconds ('idle') or the deadline passes ('deadline').
        Streamed text goes out at most every 50 ms (or 32 KB), and whatever is left at the end."""
        run = self._run
        assert run is not None
        poller = select.poll()
        poller.register(self._wake, select.POLLIN)
        with self._cond:
            self._pumping = True
            epoll, fds = self._epoll, list(self._open_fds) if self._generation else []
            for fd in fds:
                epoll.modify(fd, 0)  # the reader thread stands aside (see _read_loop)
                poller.register(fd, select.POLLIN)
        streamer = StreamBatcher(stream)
        seen = ""  # recent cleaned text, for `expect`
        last = time.monotonic()
        try:
            while True:
                with self._cond:
                    waiting = not self._pending and self._alive
                if waiting:
                    wake = deadline if idle is None else min(deadline, last + idle)
                    self._read_ready(poller, min(wake, streamer.due) - time.monotonic())
                with self._cond:
                    data = bytes(self._pending)
                    self._pending.clear()
                    alive = self._alive
                now = time.monotonic()
                if not data:
                    streamer.flush_if_due(now)
                else:
                    last = now
                    buf = run.carry + data
                    start = buf.find(run.marker)
                    end = buf.find(b"\x1e", start + len(run.marker)) if start != -1 else -1
                    if end != -1:
                        status, _, pwd = buf[start + len(run.marker) : end].partition(b":")
                        self._exit_code = int(status)
                        self._pwd = pwd.decode("utf-8", "surrogateescape")
                        streamer.add(out.feed(buf[:start]), now)
                        with self._cond:
                            self._pending[:0] = buf[end + 1 :]
                        run.carry = b""
                        return "done"
                    keep = buf.rfind(b"\x1e", max(0, len(buf) - _SENTINEL_TAIL))
                    cut = keep if keep != -1 else len(buf)
                    run.carry = buf[cut:]
                    text = out.feed(buf[:cut])
                    streamer.add(text, now)
                    if pattern is not None and text:
                        seen = (seen + text)[-4096:]
                        if pattern.search(seen):
                            return "expect"
                    continue
                if not alive:
                    out.feed(run.carry)
                    run.carry = b""
                    return "dead"
                if now >= deadline:
                    return "deadline"
                if idle is not None and now - last >= idle:
                    return "idle"
        finally:
            streamer.flush_if_due(float("inf"))
            with self._cond:
                self._pumping = False
                for fd in fds:
                    epoll.modify(fd, select.EPOLLIN)
                self._cond.notify_all()

    def _read_ready(self, poller: select.poll, timeout: float) -> None:
        """Wait up to `timeout` seconds for output (or a wake-up) and move what came into the
        pending buffer."""
        if timeout <= 0:
            return
        events = poller.poll(timeout * 1000)
        with self._cond:
            for fd, _ in events:
                if fd == self._wake:
                    read_some(fd)
                    continue
                data = read_some(fd)
                if data == b"":  # ended: the reader thread closes it when the pump is over
                    poller.unregister(fd)
                elif data:
                    self._pending += data

    # -- helpers ---------------------------------------------------------------------------

    def _store_command(self, command: str) -> None:
        """Overwrite the command file. Padding with newlines, which bash skips, instead of
        truncating saves an ftruncate (0.15 ms on some disks) on the hot path."""
        data = command.encode("utf-8", "surrogateescape") + b"\n"
        if len(data) < self._cmd_size:
            if self._cmd_size - len(data) > 65536:
                os.ftruncate(self._cmd_file, len(data))
            else:
                data += b"\n" * (self._cmd_size - len(data))
        os.pwrite(self._cmd_file, data, 0)
        self._cmd_size = len(data)

    def _restore_tty(self) -> None:
        """Undo what an interactive program (a REPL, an editor) left in the terminal's modes."""
        termios.tcsetattr(self._slave, termios.TCSANOW, self._tty_attrs)

    def _signal(self, sig: int) -> int:
        """Signal the terminal's foreground process group; if that is bash itself, interrupt bash.
        Returns the group signalled."""
        bash = self.proc.pid
        try:
            group = os.tcgetpgrp(self._master)
        except OSError:
            group = bash
        try:
            if group not in (bash, -1):
                os.killpg(group, sig)
            if group == bash or sig == signal.SIGKILL:
                os.kill(bash, signal.SIGINT)  # also ends a loop in bash that runs the command
        except ProcessLookupError:
            pass
        return group

    def _restart(self) -> None:
        self._terminate()
        run = self._run
        self._spawn(self._cwd)
        self._run = run

    def close(self) -> None:
        self._terminate()
        os.close(self._cmd_file)
        os.close(self._wake)
        os.close(self._waker)
        shutil.rmtree(self._dir, ignore_errors=True)
