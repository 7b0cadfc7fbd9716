"""The runtime's request loop: reads JSON lines, runs requests concurrently by id, writes replies."""

from __future__ import annotations

import base64
import json
import logging
import os
import platform
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable

from . import PROTOCOL_VERSION, __version__, code_hash, netbridge, usage
from .browser import BrowserManager
from .files import FileOps
from .kernel import Kernel
from .procs import ProcessTable
from .protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    NOT_INITIALIZED,
    PARSE_ERROR,
    PROTOCOL_MISMATCH,
    RESOURCE_EXHAUSTED,
    RpcError,
    attach_raw,
    error_response,
    notification,
    raw_fields,
    response,
)
from .scripts import ScriptTable
from .shells import ShellManager
from .terminals import TerminalTable
from .watch import WatchTable

if TYPE_CHECKING:  # the shapes are for mypy: importing them would cost the runtime's start-up
    from .contract import ProcWriteResult, ShellOpenResult, SysHelloResult, SysInfoResult, SysShutdownResult

log = logging.getLogger("hermetic.runtime")

DEFAULT_LIMIT = int(os.environ.get("HERMETIC_OUTPUT_LIMIT", "50000"))
_INLINE = {"sys.hello", "sys.ping", "sys.info"}  # cheap: answered on the reader thread
DRAIN_SECONDS = float(os.environ.get("HERMETIC_DRAIN_SECONDS", "30"))
"""At the end of the input, how long requests already read may take to finish and be answered."""


class Request:
    """What a handler knows of its request: the id, and a way to send notifications for it."""

    def __init__(self, server: Server, req_id: Any) -> None:
        self.id = req_id
        self._server = server

    def notify(self, method: str, params: dict[str, Any]) -> None:
        params["request"] = self.id
        self._server.send(notification(method, params, self._server.raw))


class Server:
    def __init__(self, chan_in: int, chan_out: int) -> None:
        self._in = chan_in
        self._out = chan_out
        self._write_lock = threading.Lock()
        self._reading = threading.Lock()
        self._inflight = 0  # requests read and not yet answered (counted before the next reader starts)
        self._answered = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=256, thread_name_prefix="req")
        self._ready = False
        self.raw = False  # the client reads long strings as raw bytes after their line (sys.hello)
        self.started = time.time()
        self.workspace = os.environ.get("HERMETIC_WORKSPACE") or os.getcwd()
        roots = [r for r in os.environ.get("HERMETIC_ROOTS", "/").split(os.pathsep) if r]
        self.files = FileOps(self.workspace, roots)
        self.watches = WatchTable(self.files.resolve)
        os.environ.update(netbridge.start_from_environment(self._from_host))  # the proxy variables
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
        self.shells = ShellManager(self.workspace, env)
        self.procs = ProcessTable(self.workspace, env)
        self.terminals = TerminalTable(self.workspace, env)
        self.browsers = BrowserManager(idle=float(os.environ.get("HERMETIC_BROWSER_IDLE", "300")))
        self.scripts = ScriptTable(self.workspace, env)
        self.kernel = Kernel(self.workspace, env)
        self.methods: dict[str, Callable[..., Any]] = {
            "sys.hello": self.sys_hello,
            "sys.ping": lambda req: {"pong": True},
            "sys.info": self.sys_info,
            "sys.shutdown": self.sys_shutdown,
            "sys.stats": lambda req: usage.stats(self.workspace, self.started),
            "shell.open": self.shell_open,
            "shell.run": self.shell_run,
            "shell.send": self.shell_send,
            "shell.interrupt": self.shell_interrupt,
            "shell.close": lambda req, session: {"closed": self.shells.close(session)},
            "shell.list": lambda req: {"sessions": self.shells.names()},
            "shell.state": lambda req: self.shells.state(),
            "shell.restore": lambda req, state: {"restored": self.shells.restore(state)},
            "proc.spawn": self.proc_spawn,
            "proc.poll": lambda req, id: self.procs.get(id).status(),
            "proc.log": lambda req, id, offset=None, tail=None: self.procs.get(id).log(offset, tail),
            "proc.wait": lambda req, id, timeout=30.0: self.procs.get(id).wait(float(timeout)),
            "proc.write": self.proc_write,
            "proc.attach": lambda req, id, offset=0: self.procs.get(id).attach(
                int(offset), lambda data: req.notify("proc.output", {"data": _b64(data)})
            ),
            "proc.kill": self.proc_kill,
            "proc.list": lambda req: {"processes": self.procs.list()},
            "fs.read": _plain(self.files.read),
            "fs.write": _plain(self.files.write),
            "fs.patch": _plain(self.files.patch),
            "fs.list": _plain(self.files.list),
            "fs.stat": _plain(self.files.stat),
            "fs.search": _plain(self.files.search),
            "fs.upload": _plain(self.files.upload),
            "fs.fingerprint": lambda req: self.files.fingerprint(),
            "fs.download": lambda req, path: self.files.download(
                path, lambda data: req.notify("fs.chunk", {"data": data})
            ),
            **self.browsers.methods(),
            **self.terminals.methods(),
            **self.watches.methods(),
            **self.scripts.methods(),
            **self.kernel.methods(),
        }

    # -- transport -------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        with self._write_lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self._out, view) :]

    def serve(self) -> None:
        self._stream = os.fdopen(self._in, "rb", buffering=65536)
        self._pool.submit(self._read_requests)
        threading.Event().wait()  # the process ends in _stop (os._exit): at EOF or sys.shutdown

    def _read_requests(self) -> None:
        """Read and dispatch requests on this thread until one needs a thread of its own; then a pool
        thread takes over the reading and this one runs the request, so a request never waits for a
        thread handoff (the largest cost of a round trip in CPython)."""
        try:
            with self._reading:  # one reader at a time, even if a failed submit left a stray one queued
                message = self._read_until_handoff()
            if message is not None:
                try:
                    self._handle(message)
                finally:
                    self._done()
                return
        except Exception:  # in a pool thread nobody would see it, and nothing would read any more
            log.exception("reading requests failed")
        with self._answered:  # answer what was read before the end of the stream, then stop
            if not self._answered.wait_for(lambda: self._inflight == 0, timeout=DRAIN_SECONDS):
                log.warning(
                    "channel closed; %d requests unanswered after %.0f s", self._inflight, DRAIN_SECONDS
                )
        log.info("channel closed; stopping")
        self._stop()

    def _done(self) -> None:
        with self._answered:
            self._inflight -= 1
            self._answered.notify_all()

    def _read_until_handoff(self) -> dict[str, Any] | None:
        """The first request that needs a thread of its own, after starting the next reader; None at
        the end of the stream."""
        for line in self._stream:
            message = self._parse(line) if line.strip() else None
            if message is None:
                continue
            if message["method"] in _INLINE:
                self._handle(message)
                continue
            with self._answered:
                self._inflight += 1
            try:
                self._pool.submit(self._read_requests)
            except RuntimeError as exc:  # no thread can be started: the sandbox is out of pids
                self._done()
                self.send(
                    error_response(message.get("id"), RpcError(RESOURCE_EXHAUSTED, "runtime busy: %s" % exc))
                )
                continue
            return message
        return None

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        """The request on a line (with the raw bytes that follow it), or None after replying with what
        is wrong with it."""
        try:
            message = json.loads(line)
        except ValueError as exc:
            self.send(error_response(None, RpcError(PARSE_ERROR, "not JSON: %s" % exc)))
            return None
        if isinstance(message, dict) and "raw" in message:
            try:
                fields, size = raw_fields(message)
                data = self._stream.read(size) if size else b""
                if len(data) < size:
                    return None  # the stream ended inside the raw bytes: nothing to answer
                attach_raw(message, fields, data)
            except ValueError as exc:
                self.send(
                    error_response(message.get("id"), RpcError(INVALID_REQUEST, "bad raw fields: %s" % exc))
                )
                return None
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            self.send(
                error_response(
                    message.get("id") if isinstance(message, dict) else None,
                    RpcError(INVALID_REQUEST, "a request needs a method"),
                )
            )
            return None
        return message

    def _handle(self, message: dict[str, Any]) -> None:
        req_id = message.get("id")
        try:
            result = self._call(Request(self, req_id), message["method"], message.get("params") or {})
            reply = response(req_id, result, self.raw)
        except RpcError as exc:
            reply = error_response(req_id, exc)
        except Exception as exc:  # a bug or an OS error: report it, keep serving
            log.exception("request %s failed", message.get("method"))
            reply = error_response(req_id, RpcError(INTERNAL_ERROR, "%s: %s" % (type(exc).__name__, exc)))
        if req_id is not None:
            self.send(reply)

    def _call(self, req: Request, method: str, params: dict[str, Any]) -> Any:
        handler = self.methods.get(method)
        if handler is None:
            raise RpcError(METHOD_NOT_FOUND, "unknown method %r" % method)
        if not self._ready and method != "sys.hello":
            raise RpcError(NOT_INITIALIZED, "send sys.hello first")
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "params must be an object")
        target = getattr(handler, "target", None)
        _check_params(method, target or handler, params, 0 if target else 1)
        return handler(req, **params)

    # -- sys -------------------------------------------------------------------------------

    def sys_hello(
        self, req: Request, protocol: int, client: str | None = None, raw: bool = False
    ) -> SysHelloResult:
        if protocol != PROTOCOL_VERSION:
            raise RpcError(
                PROTOCOL_MISMATCH,
                "runtime speaks protocol %d, client %s" % (PROTOCOL_VERSION, protocol),
                {"protocol": PROTOCOL_VERSION, "version": __version__, "code_hash": code_hash()},
            )
        self._ready = True
        self.raw = raw is True
        log.info("handshake with %s", client or "a client")
        return {
            "version": __version__,
            "protocol": PROTOCOL_VERSION,
            "code_hash": code_hash(),
            "raw": True,  # long strings may come as raw bytes after their line
            "python": platform.python_version(),
            "pid": os.getpid(),
        }

    def sys_info(self, req: Request) -> SysInfoResult:
        return {
            "version": __version__,
            "code_hash": code_hash(),
            "python": platform.python_version(),
            "pid": os.getpid(),
            "uid": os.getuid(),
            "hostname": platform.node(),
            "uptime": time.time() - self.started,
            "workspace": self.workspace,
            "roots": self.files.roots,
            "sessions": self.shells.names(),
            "processes": len(self.procs.list()),
        }

    def _from_host(self, command: str, client: Any) -> None:
        """A command on the ingress socket from any process on the host: `watch PATH` streams file
        events, `stats` answers one line of sys.stats."""
        if command.startswith("watch "):
            self.watches.serve_socket(command[len("watch ") :], client)
        elif command == "stats":
            client.sendall(json.dumps(usage.stats(self.workspace, self.started)).encode("ascii") + b"\n")

    def sys_shutdown(self, req: Request) -> SysShutdownResult:
        threading.Timer(0.05, self._stop).start()
        return {"stopping": True}

    def _stop(self) -> None:
        self.browsers.close_all()
        self.shells.close_all()
        self.terminals.close_all()
        self.watches.close_all()
        self.procs.kill_all()
        self.scripts.close()
        self.kernel.shutdown()
        os._exit(0)

    # -- shell -----------------------------------------------------------------------------

    def shell_open(
        self,
        req: Request,
        session: str = "default",
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ShellOpenResult:
        shell = self.shells.open(session, cwd, env)
        return {"session": session, "pid": shell.proc.pid, "cwd": shell.cwd}

    def shell_run(
        self,
        req: Request,
        command: str,
        session: str = "default",
        timeout: float = 120.0,
        stdin: str | None = None,
        interactive: bool = False,
        expect: str | None = None,
        idle: float = 1.0,
        limit: int = DEFAULT_LIMIT,
        stream: bool = False,
    ) -> dict[str, Any]:
        if not isinstance(command, str):
            raise RpcError(INVALID_PARAMS, "command must be a string")
        return self.shells.open(session).run(
            command,
            float(timeout),
            int(limit),
            stdin,
            interactive,
            expect,
            float(idle),
            self._streamer(req, session, stream),
        )

    def shell_send(
        self,
        req: Request,
        text: str,
        session: str = "default",
        timeout: float = 30.0,
        expect: str | None = None,
        idle: float = 1.0,
        limit: int = DEFAULT_LIMIT,
        stream: bool = False,
    ) -> dict[str, Any]:
        return self.shells.get(session).send(
            text, float(timeout), int(limit), expect, float(idle), self._streamer(req, session, stream)
        )

    @staticmethod
    def _streamer(req: Request, session: str, wanted: bool) -> Callable[[str], None] | None:
        if not wanted:
            return None
        return lambda text: req.notify("shell.output", {"session": session, "text": text})

    def shell_interrupt(self, req: Request, session: str = "default") -> dict[str, Any]:
        return self.shells.get(session).interrupt(DEFAULT_LIMIT)

    # -- background processes --------------------------------------------------------------

    def proc_spawn(
        self,
        req: Request,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        log_limit: int = 1 << 20,
        separate_stderr: bool = False,
    ) -> dict[str, Any]:
        return self.procs.spawn(command, cwd, env, int(log_limit), bool(separate_stderr))

    def proc_write(self, req: Request, id: str, data: str = "", eof: bool = False) -> ProcWriteResult:
        self.procs.get(id).write(data, eof)
        return {"written": len(data)}

    def proc_kill(self, req: Request, id: str, signal: str = "TERM", wait: float = 2.0) -> dict[str, Any]:
        try:
            signum = _signal_number(signal)
        except ValueError as exc:
            raise RpcError(INVALID_PARAMS, str(exc)) from exc
        return self.procs.get(id).kill(signum, float(wait))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _plain(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A handler for a method that needs nothing of its request; parameters are checked against `fn`."""

    def handler(req: Request, **params: Any) -> Any:
        return fn(**params)

    handler.target = fn  # type: ignore[attr-defined]
    return handler


def _check_params(method: str, fn: Callable[..., Any], params: dict[str, Any], leading: int) -> None:
    """Unknown or missing parameters are the caller's error, reported, never a TypeError inside.
    (Read from the code object: importing `inspect` costs the runtime's start-up ~25 ms.)"""
    code = fn.__code__
    skip = leading + (1 if hasattr(fn, "__self__") else 0)  # the request, and self
    names = code.co_varnames[skip : code.co_argcount + code.co_kwonlyargcount]
    unknown = [] if code.co_flags & 0x08 else sorted(set(params) - set(names))  # 0x08: **kwargs
    required = code.co_varnames[skip : code.co_argcount - len(fn.__defaults__ or ())]
    missing = [name for name in required if name not in params]
    problems = []
    if unknown:
        problems.append("unknown parameters: " + ", ".join(unknown))
    if missing:
        problems.append("missing parameters: " + ", ".join(missing))
    if problems:
        raise RpcError(INVALID_PARAMS, "%s: %s" % (method, "; ".join(problems)), {"accepted": list(names)})


def _signal_number(name: str) -> int:
    name = name.upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    if not hasattr(signal, name):
        raise ValueError("unknown signal %r" % name)
    return int(getattr(signal, name))


def _widen_pipe(fd: int) -> None:
    """A 1 MB pipe instead of 64 KB: a large message then crosses in a few writes rather than
    sixteen, each a wake-up of the process at the other end (docker's shim, the local parent)."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except (ImportError, OSError):  # not a pipe (a socket), not Linux, or over pipe-max-size
        pass


def main() -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("HERMETIC_LOG_LEVEL", "WARNING"),
        format="runtime %(levelname)s %(message)s",
    )
    # The channel keeps private copies of fds 0 and 1; what commands inherit is /dev/null and stderr,
    # so nothing a child does can read from or write into the channel.
    chan_in, chan_out = os.dup(0), os.dup(1)
    for fd in (chan_in, chan_out):
        _widen_pipe(fd)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, lambda signum, frame: None)  # not SIG_IGN: children would inherit it
    Server(chan_in, chan_out).serve()
