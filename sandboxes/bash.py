"""bash on a PTY for a shell session: the rc file that marks each run's end, the environment every
session gets, starting the process, and the raw fd helpers the session reads and writes with."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import struct
import subprocess
import termios
from dataclasses import dataclass

from . import procutil
from .protocol import RESOURCE_EXHAUSTED, RpcError

RC = r"""
PS1=''; PS2=''; PS0=''; PS4='+ '
set +o history +H; unset HISTFILE MAILCHECK
__hm_t=init
__hm_p() {
  local s=$?
  if [ -n "$__hm_y" ]; then __hm_y=; printf '\036%s:%s:%s\036' "$__hm_t" "$s" "$PWD" >/dev/tty
  else printf '\036%s:%s:%s\036' "$__hm_t" "$s" "$PWD"; fi
}
PROMPT_COMMAND=__hm_p
readonly PROMPT_COMMAND
"""
SESSION_ENV = {
    "TERM": "dumb",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "MANPAGER": "cat",
    "SYSTEMD_PAGER": "",
    "GIT_TERMINAL_PROMPT": "0",
    "DEBIAN_FRONTEND": "noninteractive",
    "PYTHONUNBUFFERED": "1",
}


@dataclass
class Bash:
    """A started bash: its process, the PTY (master and the slave the runtime keeps open), the pipe
    it reads command lines from and the pipe its output goes to, and the terminal modes set."""

    proc: subprocess.Popen
    master: int
    slave: int
    cmd: int
    out: int
    tty_attrs: list


def start_bash(rc_path: str, cwd: str, env: dict[str, str]) -> Bash:
    """An interactive bash whose controlling terminal is a new PTY, reading commands from a pipe."""
    master, slave = os.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR  # \n stays \n
    attrs[3] &= ~(termios.ECHO | termios.ECHOE | termios.ECHOK | termios.ECHONL)
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    cmd_r, cmd_w = os.pipe()
    out_r, out_w = os.pipe()
    env = dict(env)
    env.update(SESSION_ENV)
    try:
        proc = subprocess.Popen(
            ["bash", "--noprofile", "--rcfile", rc_path, "--noediting", "-i"],
            stdin=cmd_r,
            stdout=out_w,
            stderr=out_w,
            cwd=cwd if os.path.isdir(cwd) else None,
            env=env,
            start_new_session=True,
            pass_fds=(slave,),
            preexec_fn=lambda: _take_terminal(slave),
        )
    except OSError as exc:
        for fd in (master, slave, cmd_r, cmd_w, out_r, out_w):
            os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.ENOMEM):
            raise RpcError(RESOURCE_EXHAUSTED, "cannot start bash: %s" % exc.strerror) from exc
        raise
    for fd in (cmd_r, out_w):
        os.close(fd)
    return Bash(proc, master, slave, cmd_w, out_r, attrs)


def write_all(fd: int, text: str) -> None:
    data = text.encode("utf-8", "surrogateescape")
    while data:
        try:
            data = data[os.write(fd, data) :]
        except BlockingIOError:  # the PTY's input queue is full (its master is non-blocking)
            select.select([], [fd], [])


def read_some(fd: int) -> bytes | None:
    """What a non-blocking fd has: None when nothing (yet), b'' when it ended."""
    try:
        return os.read(fd, 65536)
    except BlockingIOError:
        return None
    except OSError:  # EIO: the PTY hung up
        return b""


def poke(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):  # full: a wake-up is pending anyway
        os.write(fd, b"!")


def _take_terminal(slave: int) -> None:
    """In the child, after setsid: make the PTY its controlling terminal (job control needs one)."""
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    os.close(slave)  # bash opens /dev/tty itself; commands should not inherit this fd
    procutil.prefer_for_oom_kill()
