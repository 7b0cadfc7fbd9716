"""Scripts that call the agent's tools (execute_code): a python3 child whose tool calls come back over
a pair of pipes and leave through the runtime's channel, one request per event.

`script.start` runs the script and answers with its first event; `script.reply` hands the result of
a call back and answers with the next one. An event is a tool call the script makes, or its end. So
each inner call costs one round trip on the channel the control plane already holds, and the script
needs no network.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import tempfile
import threading
from typing import TYPE_CHECKING, Any, Callable

from .output import OutputBuffer
from .procutil import kill_session
from .protocol import INVALID_PARAMS, NOT_FOUND, RpcError
from .script_host import Host, Spares

if TYPE_CHECKING:  # the shapes are for mypy; importing them would cost the runtime's start-up
    from .contract_tools import CallEvent, CallReply, DoneEvent, ScriptCancelResult

MAX_LINE = 64 * 1024 * 1024
"""The longest tool call a script may write (its arguments); a longer one ends the script."""


class ScriptRun:
    """One running script: its process, the calls it has written and not yet had answered, its output."""

    def __init__(
        self,
        run_id: str,
        host: Host,
        script: str,
        cwd: str,
        tools: dict[str, Any],
        timeout: float,
        limit: int,
    ) -> None:
        self.id = run_id
        self.output = OutputBuffer(limit)
        self.timed_out = False
        self.cancelled = False
        self.problem = ""  # the script broke the stub protocol
        self._exited = threading.Event()
        self._dir = tempfile.mkdtemp(prefix="hermetic-script-")
        path = os.path.join(self._dir, "script.py")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(script)
        self.proc = host.proc
        self._calls = host.calls
        self._replies = host.replies
        with contextlib.suppress(OSError):  # it died waiting: its exit code and output say why
            host.hand(path, cwd, tools)
        self._timer = threading.Timer(timeout, self._time_out)
        self._timer.daemon = True
        self._timer.start()
        output = threading.Thread(target=self._read_output, name="script-out", daemon=True)
        output.start()
        threading.Thread(target=self._wait, args=(output,), name="script-wait", daemon=True).start()

    # -- the script's side -------------------------------------------------------------------

    def _read_output(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            self.output.feed(chunk)
        self.proc.stdout.close()

    def _wait(self, output: threading.Thread) -> None:
        self.proc.wait()
        self._timer.cancel()
        kill_session(self.proc.pid)  # what it left running in the background ends with it
        output.join()
        self._exited.set()

    def _time_out(self) -> None:
        self.timed_out = True
        self.kill()

    def kill(self) -> None:
        kill_session(self.proc.pid)

    # -- the control plane's side ------------------------------------------------------------

    def next_event(self) -> CallEvent | DoneEvent:
        """The next call the script makes, read on the caller's thread (no hand-off), or its end. Calls
        written by a script that was then killed (timeout, cancel) are dropped: nobody would read them."""
        for line in iter(lambda: self._calls.readline(MAX_LINE), b""):
            if self.timed_out or self.cancelled or self.problem:
                continue
            try:
                call = json.loads(line)
                if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                    raise ValueError("a call needs a tool name")
                arguments = call.get("arguments") or {}
                if not isinstance(arguments, dict):
                    raise ValueError("a call's arguments must be an object")
            except ValueError as exc:
                self.problem = "the script wrote a malformed tool call (%s)" % exc
                self.kill()
                continue
            return {"event": "call", "run": self.id, "name": call["name"], "arguments": arguments}
        self._exited.wait()
        with contextlib.suppress(OSError):  # a reply the killed script never read: nothing to flush to
            self._replies.close()
        self._calls.close()
        output, cut = self.output.result()
        _remove(self._dir)
        return {
            "event": "done",
            "run": self.id,
            "output": output,
            "truncated": cut,
            "exit_code": self.proc.returncode,
            "timed_out": self.timed_out,
            "cancelled": self.cancelled,
            "problem": self.problem,
        }

    def reply(self, result: CallReply) -> None:
        try:
            self._replies.write(json.dumps(result).encode("utf-8", "surrogatepass") + b"\n")
            self._replies.flush()
        except (OSError, ValueError):  # the script is gone (killed, or exited without reading)
            pass


class ScriptTable:
    """The runs of this runtime by id, and the protocol methods over them."""

    def __init__(self, workspace: str, env: dict[str, str]) -> None:
        self._workspace = workspace
        self._spares = Spares(workspace, env)
        self._runs: dict[str, ScriptRun] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def methods(self) -> dict[str, Callable[..., Any]]:
        return {"script.start": self.start, "script.reply": self.reply, "script.cancel": self.cancel}

    def start(
        self,
        req: Any,
        script: str,
        tools: dict[str, Any] | None = None,
        timeout: float = 300.0,
        limit: int = 50000,
        cwd: str | None = None,
    ) -> CallEvent | DoneEvent:
        """Run `script`; `tools` maps each tool it may call to its parameter names (for positional use)."""
        if not isinstance(script, str) or not isinstance(tools or {}, dict):
            raise RpcError(INVALID_PARAMS, "script must be a string and tools an object")
        where = os.path.join(self._workspace, cwd) if cwd else self._workspace
        run_id = "s%d" % next(self._ids)
        run = ScriptRun(run_id, self._spares.take(), script, where, tools or {}, float(timeout), int(limit))
        with self._lock:
            self._runs[run_id] = run
        return self._next(run)

    def reply(self, req: Any, run: str, result: CallReply) -> CallEvent | DoneEvent:
        """Hand the script the result of the call it is waiting on; answers with its next event."""
        script = self._get(run)
        script.reply(result)
        return self._next(script)

    def cancel(self, req: Any, run: str | None = None) -> ScriptCancelResult:
        """Kill the script `run`, or every running one (the user interrupted the agent)."""
        with self._lock:
            runs = [s for r, s in self._runs.items() if run is None or r == run]
        for script in runs:
            script.cancelled = True
            script.kill()
        return {"cancelled": len(runs)}

    def close(self) -> None:
        """The runtime stops: kill the scripts and the spare interpreter."""
        self.cancel(None)
        self._spares.close()

    def _next(self, run: ScriptRun) -> CallEvent | DoneEvent:
        event = run.next_event()
        if event["event"] == "done":
            with self._lock:
                self._runs.pop(run.id, None)
            self._spares.refill()
        return event

    def _get(self, run_id: str) -> ScriptRun:
        with self._lock:
            script = self._runs.get(run_id)
        if script is None:
            raise RpcError(NOT_FOUND, "no running script %r (it ended, or never started)" % run_id)
        return script


def _remove(path: str) -> None:
    for name in os.listdir(path):
        os.unlink(os.path.join(path, name))
    os.rmdir(path)
