"""The control plane's end of the runtime protocol: one byte stream, many concurrent requests."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import queue
import select
import socket
import struct
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

from sandboxes import PROTOCOL_VERSION, code_hash
from sandboxes.contract import Method
from sandboxes.protocol import RAW_MAX, attach_raw, encode, raw_fields

from .errors import CallTimeout, HandshakeError, RuntimeCallError, SandboxGone

log = logging.getLogger("hermetic.channel")
runtime_log = logging.getLogger("hermetic.runtime")

NotifyFn = Callable[[str, dict[str, Any]], None]


class Transport(ABC):
    """A byte stream to the runtime's stdin/stdout."""

    @abstractmethod
    def send(self, data: bytes) -> None:
        """Write all of `data`; raises OSError when the stream is gone."""

    @abstractmethod
    def recv(self, timeout: float | None) -> bytes | None:
        """Next bytes from the runtime's stdout; b'' when the stream ended, None when `timeout`
        seconds (None: no limit; 0: only what is already there) passed without any."""

    @abstractmethod
    def close(self) -> None:
        """Close the stream; the runtime sees EOF and stops."""


def readable_poller(fd: int) -> select.poll:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return poller


def wait_readable(poller: select.poll, timeout: float | None) -> bool:
    """True when the polled fd has data or hit its end within `timeout` seconds (None: no limit)."""
    return bool(poller.poll(None if timeout is None else timeout * 1000))


class PumpedStream:
    """A blocking source of chunks moved by its own thread into a queue, so a reader can wait on it
    with a timeout: for streams with no pollable fd of their own (Modal's stdout iterator; paramiko,
    whose fileno() also turns readable on stderr data). The end, b'', stays there once reached."""

    def __init__(self, chunks: Iterable[bytes], label: str) -> None:
        self._label = label
        self._chunks: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._pump, args=(chunks,), name=f"stdout-{label}", daemon=True).start()

    def get(self, timeout: float | None) -> bytes | None:
        """Next chunk; b'' at the end; None when `timeout` seconds (0: none) passed without one."""
        try:
            chunk = self._chunks.get(timeout=timeout) if timeout != 0 else self._chunks.get_nowait()
        except queue.Empty:
            return None
        if not chunk:
            self._chunks.put(b"")
        return chunk

    def _pump(self, chunks: Iterable[bytes]) -> None:
        try:
            for chunk in chunks:
                if chunk:
                    self._chunks.put(bytes(chunk))
        except Exception as exc:  # the stream broke: for the channel that is its end
            log.warning("%s: stdout stream failed: %s", self._label, exc)
        self._chunks.put(b"")


def log_stderr_lines(stream: Any, label: str) -> None:
    """Forward a runtime's stderr to logging, a line at a time (run in a thread)."""
    for raw in iter(stream.readline, b""):
        runtime_log.info("[%s] %s", label, raw.decode("utf-8", "replace").rstrip())


class PipeTransport(Transport):
    """A local child process's pipes (local backend, and stand-ins in tests)."""

    def __init__(self, proc: subprocess.Popen[bytes], label: str) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self._in = proc.stdin.fileno()
        self._out = proc.stdout.fileno()
        self._poller = readable_poller(self._out)
        if proc.stderr is not None:
            threading.Thread(target=log_stderr_lines, args=(proc.stderr, label), daemon=True).start()

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._in, view) :]

    def recv(self, timeout: float | None) -> bytes | None:
        try:
            if not wait_readable(self._poller, timeout):
                return None
            return os.read(self._out, 65536)  # not larger: a 256 KB buffer is an mmap per read
        except (OSError, ValueError):  # ValueError: the pipe was closed under us
            return b""

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass


class FramedSocketTransport(Transport):
    """Docker's attach/exec stream with tty off: 8-byte headers (stream, size) before each frame."""

    def __init__(self, sock: socket.socket, label: str) -> None:
        self._sock = sock  # stays blocking: a timeout on it would apply to a concurrent sendall too
        self._poller = readable_poller(sock.fileno())
        self._label = label
        self._buf = bytearray()
        self._err = bytearray()

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def recv(self, timeout: float | None) -> bytes | None:
        while True:
            while len(self._buf) >= 8:
                kind, size = struct.unpack(">BxxxL", self._buf[:8])
                if len(self._buf) < 8 + size:
                    break
                with memoryview(self._buf) as view:  # one copy of the frame, not two
                    payload = bytes(view[8 : 8 + size])
                del self._buf[: 8 + size]
                if kind == 2:
                    self._log_stderr(payload)
                elif payload:
                    return payload
            try:
                if not wait_readable(self._poller, timeout):
                    return None
                data = self._sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                return b""
            self._buf += data

    def _log_stderr(self, payload: bytes) -> None:
        self._err += payload
        *lines, rest = self._err.split(b"\n")
        self._err = bytearray(rest)
        for line in lines:
            runtime_log.info("[%s] %s", self._label, line.decode("utf-8", "replace"))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


class _Pending:
    __slots__ = ("done", "result", "error", "on_notify")

    def __init__(self, on_notify: NotifyFn | None) -> None:
        self.done = False
        self.result: Any = None
        self.error: Exception | None = None
        self.on_notify = on_notify


class Channel:
    """Sends requests with fresh ids and matches replies and notifications to them.

    No reader thread: a caller waiting for its reply reads the stream itself and delivers what it
    reads to whoever it belongs to (leader/follower). When it has its reply it steps down and a
    waiting caller takes over. This saves a thread handoff per call (~60 us in CPython), the largest
    single cost of a round trip. Between calls nobody reads; a stream that ended is noticed by
    `closed`, which reads whatever is already there without waiting.
    """

    def __init__(self, transport: Transport, label: str) -> None:
        self.label = label
        self._transport = transport
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._cond = threading.Condition()  # guards _pending and _closed; signals replies
        self._send_lock = threading.Lock()
        self._read_lock = threading.Lock()  # held by the caller that is reading the stream
        self._buf = bytearray()  # what was read and not yet delivered (del from the front is O(1))
        self._scanned = 0  # how much of _buf is known to hold no newline
        self._awaiting: tuple[dict[str, Any], list[tuple[str, int]], int] | None = None  # a message
        # whose raw bytes are still coming: (message, its raw fields, their total size)
        self._raw = False  # long strings travel as raw bytes after their line (agreed in the handshake)
        self._closed: str | None = None
        self.info: dict[str, Any] = {}

    @property
    def closed(self) -> bool:
        if self._closed is None and self._read_lock.acquire(blocking=False):
            try:  # take in what is there: the end of the stream, if the runtime is gone
                self._read(None, 0.0)
            finally:
                self._step_down()
        return self._closed is not None

    def wait_closed(self, timeout: float) -> bool:
        """Read until the stream ends, at most `timeout` seconds; True when it ended."""
        deadline = time.monotonic() + timeout
        while self._closed is None and (remaining := deadline - time.monotonic()) > 0:
            if self._read_lock.acquire(timeout=remaining):
                try:
                    self._read(None, deadline)
                finally:
                    self._step_down()
        return self._closed is not None

    def handshake(self, timeout: float = 30.0) -> dict[str, Any]:
        """First request on a channel: protocol check. Returns the runtime's version and code hash.
        (The channel's own request: the typed client, backends/runtime_client.py, sits above it.)"""
        try:
            self.info = self.call(
                "sys.hello",
                {"protocol": PROTOCOL_VERSION, "client": "hermetic", "raw": True},
                timeout=timeout,
            )
        except (SandboxGone, CallTimeout, RuntimeCallError) as exc:
            raise HandshakeError(f"runtime in {self.label} did not complete the handshake: {exc}") from exc
        if self.info.get("code_hash") != code_hash():
            log.info(
                "runtime in %s runs code %s, control plane has %s",
                self.label,
                self.info.get("code_hash"),
                code_hash(),
            )
        self._raw = self.info.get("raw") is True  # an older runtime reads only lines
        return self.info

    def call(
        self,
        method: Method,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_notify: NotifyFn | None = None,
    ) -> Any:
        """Send one request and wait for its reply. Raises RuntimeCallError, SandboxGone, CallTimeout."""
        req_id = next(self._ids)
        pending = _Pending(on_notify)
        line = encode({"id": req_id, "method": method, "params": params or {}}, self._raw)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if self._closed is not None:
                raise SandboxGone(f"{self.label}: {self._closed}")
            self._pending[req_id] = pending
        try:
            with self._send_lock:  # a large line may take several writes: never interleave two
                self._transport.send(line)
        except OSError as exc:
            self._fail_all(f"stream write failed: {exc}")
        while not pending.done:
            if self._read_lock.acquire(blocking=False):
                try:
                    self._read(pending, deadline)
                finally:
                    self._step_down()
            else:
                with self._cond:  # another caller reads: wait for our reply, or for it to step down
                    if not pending.done and self._read_lock.locked():
                        self._cond.wait(None if deadline is None else max(deadline - time.monotonic(), 0))
            if not pending.done and deadline is not None and time.monotonic() >= deadline:
                with self._cond:
                    if not pending.done:
                        self._pending.pop(req_id, None)
                        raise CallTimeout(f"{self.label}: no reply to {method} within {timeout} s")
        if pending.error is not None:
            raise pending.error
        return pending.result

    def close(self) -> None:
        self._transport.close()
        self._fail_all("channel closed")

    def _step_down(self) -> None:
        self._read_lock.release()
        with self._cond:
            self._cond.notify_all()  # a waiting caller becomes the reader

    def _read(self, pending: _Pending | None, deadline: float | None) -> None:
        """Read and deliver until `pending` is done (None: until nothing more is there), the stream
        ends or `deadline` (monotonic; 0.0: do not wait) passes. The caller holds the read lock."""
        while self._closed is None and (pending is None or not pending.done):
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            data = self._transport.recv(timeout)
            if data is None:
                return
            if not data:
                self._fail_all("the runtime's stream ended (sandbox stopped or was removed)")
                return
            self._buf += data
            self._take()

    def _take(self) -> None:
        """Deliver every whole message in the buffer: a line, and the raw bytes it announces."""
        buf = self._buf
        while True:
            if self._awaiting is not None:
                message, fields, size = self._awaiting
                if len(buf) < size:
                    return
                self._awaiting = None
                try:
                    with memoryview(buf) as view:
                        attach_raw(message, fields, view[:size])
                except ValueError as exc:
                    self._fail_all(f"the runtime sent raw fields that are not UTF-8: {exc}")
                    return
                del buf[:size]
                self._dispatch(message)
                continue
            end = buf.find(b"\n", self._scanned)
            if end < 0:
                self._scanned = len(buf)
                if len(buf) > RAW_MAX:
                    self._fail_all(f"the runtime sent a line of over {RAW_MAX} bytes")
                return
            line = bytes(buf[:end])
            del buf[: end + 1]
            self._scanned = 0
            if line.strip():
                self._deliver(line)
            if self._closed is not None:
                return

    def _deliver(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            log.warning("%s: runtime sent a line that is not JSON: %r", self.label, line[:200])
            return
        if not isinstance(message, dict):
            log.warning("%s: runtime sent a line that is not an object: %r", self.label, line[:200])
            return
        if "raw" in message:
            try:
                fields, size = raw_fields(message)
            except ValueError as exc:  # no way to tell where its bytes end: the stream is lost
                self._fail_all(f"the runtime sent a bad raw announcement: {exc}")
                return
            self._awaiting = (message, fields, size)
            return
        self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        req_id = message.get("id")
        if req_id is not None and ("result" in message or "error" in message):
            with self._cond:
                pending = self._pending.pop(req_id, None)
                if pending is None:
                    return
                if "error" in message:
                    err = message["error"] or {}
                    pending.error = RuntimeCallError(
                        err.get("code", -1), err.get("message", "error"), err.get("data")
                    )
                else:
                    pending.result = message["result"]
                pending.done = True
                self._cond.notify_all()
        elif "method" in message:
            params = message.get("params") or {}
            request = params.get("request")
            with self._cond:
                pending = self._pending.get(request) if isinstance(request, int) else None
            if pending is not None and pending.on_notify is not None:
                try:
                    pending.on_notify(message["method"], params)
                except Exception:
                    log.exception("notification handler failed")
        elif "error" in message:
            log.warning("%s: runtime reported %s", self.label, message["error"])

    def _fail_all(self, reason: str) -> None:
        with self._cond:
            if self._closed is None:
                self._closed = reason
            pending, self._pending = self._pending, {}
            for item in pending.values():
                item.error = SandboxGone(f"{self.label}: {reason}")
                item.done = True
            self._cond.notify_all()
