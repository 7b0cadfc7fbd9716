"""A python3 started ahead of time for the next execute_code script: it has paid the interpreter's
start-up (tens of ms) before the script arrives, and is handed the script over a pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from .procutil import prefer_for_oom_kill

STUB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stub")
"""Holds hermetic_tools.py, the module a script imports; put first on the script's PYTHONPATH."""

# Waits for one JSON line on stdin (the script's path, working directory, tools), then runs the script
# as __main__; a traceback starts at the script's own frame, not at this one.
# gc.freeze: what the interpreter holds before the script is never collected, so its teardown at exit
# skips most of its objects (3-4 ms instead of 7-10 ms added to every script's end).
HOST = r"""
import gc, json, os, sys, threading, traceback
gc.freeze()
order = sys.stdin.readline()
if not order:
    sys.exit(0)
order = json.loads(order)
os.environ["HERMETIC_TOOLS"] = json.dumps(order["tools"])
os.chdir(order["cwd"])
devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(devnull, 0)
sys.argv = [order["path"]]
sys.path[0] = os.path.dirname(order["path"])
def hook(kind, value, tb):
    traceback.print_exception(kind, value, tb.tb_next if tb is not None else tb)
sys.excepthook = hook
with open(order["path"], encoding="utf-8") as fh:
    code = compile(fh.read(), order["path"], "exec")
del order, devnull, hook, fh
exec(code, {"__name__": "__main__", "__file__": sys.argv[0], "__builtins__": __builtins__})
"""


class Host:
    """One waiting interpreter, with the two pipes of the tool calls its script will make."""

    def __init__(self, cwd: str, env: dict[str, str]) -> None:
        calls_r, calls_w = os.pipe()  # script -> runtime
        replies_r, replies_w = os.pipe()  # runtime -> script
        child_env = dict(env)
        child_env.update(
            PYTHONPATH=os.pathsep.join(p for p in (STUB_DIR, env.get("PYTHONPATH", "")) if p),
            PYTHONUNBUFFERED="1",
            HERMETIC_TOOLS_FDS="%d,%d" % (calls_w, replies_r),
        )
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", HOST],
                cwd=cwd,
                env=child_env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                pass_fds=(calls_w, replies_r),
                start_new_session=True,
                preexec_fn=prefer_for_oom_kill,
            )
        finally:
            os.close(calls_w)
            os.close(replies_r)
        self.calls = os.fdopen(calls_r, "rb")
        self.replies = os.fdopen(replies_w, "wb")

    def hand(self, path: str, cwd: str, tools: dict[str, object]) -> None:
        """Give it its script; raises OSError when it died waiting (the caller takes a fresh one)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"path": path, "cwd": cwd, "tools": tools}).encode() + b"\n")
        self.proc.stdin.close()

    def discard(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for pipe in (self.calls, self.replies, self.proc.stdout, self.proc.stdin):
            if pipe is not None:
                pipe.close()


class Spares:
    """Keeps one Host ready for the next script: made in the background when a script ends (`refill`),
    not while one runs, so its start-up does not take the CPU from the script and its calls. A script
    that comes while it is being made waits for it rather than starting a second interpreter."""

    def __init__(self, cwd: str, env: dict[str, str]) -> None:
        self._cwd = cwd
        self._env = env
        self._spare: Host | None = None
        self._making = False
        self._closed = False
        self._cond = threading.Condition()

    def take(self) -> Host:
        with self._cond:
            self._cond.wait_for(lambda: not self._making)
            host, self._spare = self._spare, None
        if host is not None and host.proc.poll() is None:
            return host
        if host is not None:
            host.discard()
        return Host(self._cwd, self._env)

    def refill(self) -> None:
        with self._cond:
            if self._closed or self._making or self._spare is not None:
                return
            self._making = True
        threading.Thread(target=self._refill, name="script-spare", daemon=True).start()

    def _refill(self) -> None:
        host: Host | None = None
        try:
            host = Host(self._cwd, self._env)
        finally:  # a failed start leaves no spare: take() starts its own, and says why if it fails too
            with self._cond:
                self._making = False
                if not self._closed:  # a refill that outlived close() keeps nothing
                    self._spare, host = host, None
                self._cond.notify_all()
            if host is not None:
                host.discard()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            host, self._spare = self._spare, None
        if host is not None:
            host.discard()
