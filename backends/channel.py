"""The control plane's end of the runtime protocol: one byte stream, many concurrent requests."""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import socket
import struct
import subprocess
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from sandboxes import PROTOCOL_VERSION, code_hash

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
    def recv(self) -> bytes:
        """Next bytes from the runtime's stdout; b'' when the stream ended."""

    @abstractmethod
    def close(self) -> None:
        """Close the stream; the runtime sees EOF and stops."""


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
        if proc.stderr is not None:
            threading.Thread(target=log_stderr_lines, args=(proc.stderr, label), daemon=True).start()

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._in, view) :]

    def recv(self) -> bytes:
        try:
            return os.read(self._out, 262144)
        except OSError:
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
        self._sock = sock
        self._label = label
        self._buf = bytearray()
        self._err = bytearray()

    def send(self, data: bytes) -> None:
        self._sock.sendall(data)

    def recv(self) -> bytes:
        while True:
            while len(self._buf) >= 8:
                kind, size = struct.unpack(">BxxxL", self._buf[:8])
                if len(self._buf) < 8 + size:
                    break
                payload = bytes(self._buf[8 : 8 + size])
                del self._buf[: 8 + size]
                if kind == 2:
                    self._log_stderr(payload)
                elif payload:
                    return payload
            try:
                data = self._sock.recv(262144)
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
    __slots__ = ("event", "result", "error", "on_notify")

    def __init__(self, on_notify: NotifyFn | None) -> None:
        self.event = threading.Event()
        self.result: Any = None
        self.error: Exception | None = None
        self.on_notify = on_notify


class Channel:
    """Sends requests with fresh ids and matches replies and notifications to them."""

    def __init__(self, transport: Transport, label: str) -> None:
        self.label = label
        self._transport = transport
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._closed: str | None = None
        self.info: dict[str, Any] = {}
        self._reader = threading.Thread(target=self._read_loop, name=f"chan-{label}", daemon=True)
        self._reader.start()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def handshake(self, timeout: float = 30.0) -> dict[str, Any]:
        """First request on a channel: protocol check. Returns the runtime's version and code hash."""
        try:
            self.info = self.call(
                "sys.hello", {"protocol": PROTOCOL_VERSION, "client": "hermetic"}, timeout=timeout
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
        return self.info

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        on_notify: NotifyFn | None = None,
    ) -> Any:
        """Send one request and wait for its reply. Raises RuntimeCallError, SandboxGone, CallTimeout."""
        req_id = next(self._ids)
        pending = _Pending(on_notify)
        line = (
            json.dumps(
                {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params or {}},
                separators=(",", ":"),
            ).encode()
            + b"\n"
        )
        with self._lock:
            if self._closed is not None:
                raise SandboxGone(f"{self.label}: {self._closed}")
            self._pending[req_id] = pending
        try:
            with self._send_lock:  # a large line may take several writes: never interleave two
                self._transport.send(line)
        except OSError as exc:
            self._fail_all(f"stream write failed: {exc}")
        if not pending.event.wait(timeout):
            with self._lock:
                self._pending.pop(req_id, None)
            raise CallTimeout(f"{self.label}: no reply to {method} within {timeout} s")
        if pending.error is not None:
            raise pending.error
        return pending.result

    def close(self) -> None:
        self._transport.close()
        self._fail_all("channel closed")

    def _read_loop(self) -> None:
        buf = b""
        while True:
            data = self._transport.recv()
            if not data:
                break
            buf += data
            if b"\n" not in data:
                continue
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    self._deliver(line)
        self._fail_all("the runtime's stream ended (sandbox stopped or was removed)")

    def _deliver(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            log.warning("%s: runtime sent a line that is not JSON: %r", self.label, line[:200])
            return
        req_id = message.get("id")
        if req_id is not None and ("result" in message or "error" in message):
            with self._lock:
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
            pending.event.set()
        elif "method" in message:
            params = message.get("params") or {}
            request = params.get("request")
            with self._lock:
                pending = self._pending.get(request) if isinstance(request, int) else None
            if pending is not None and pending.on_notify is not None:
                try:
                    pending.on_notify(message["method"], params)
                except Exception:
                    log.exception("notification handler failed")
        elif "error" in message:
            log.warning("%s: runtime reported %s", self.label, message["error"])

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            if self._closed is None:
                self._closed = reason
            pending, self._pending = self._pending, {}
        for item in pending.values():
            item.error = SandboxGone(f"{self.label}: {reason}")
            item.event.set()
