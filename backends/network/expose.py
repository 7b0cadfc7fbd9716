"""Ports exposed on request: 127.0.0.1:HOSTPORT on the host -> a port a program listens on inside.

The sandbox's network stays none. Its runtime listens on `<net dir>/in/ingress.sock` (mounted read-write
at SANDBOX_INGRESS_DIR); each host connection is carried there after a first line naming the port. The
sandbox owns that directory, so the host opens the socket without following links (O_PATH|O_NOFOLLOW,
then /proc/self/fd): a symlink planted inside can never point the host at one of its own sockets.
Each exposure is also a record in `<net dir>/exposed/PORT.json`, so any process can list them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from .loop import on_loop

SANDBOX_INGRESS_DIR = "/run/hermetic-ingress"
INGRESS_NAME = "ingress.sock"
CHUNK = 256 * 1024


class ExposeError(Exception):
    """The port cannot be exposed (bad port, the host port is taken, the sandbox is gone)."""


@dataclass(frozen=True)
class Exposure:
    port: int
    """The port inside the sandbox."""
    host: str
    host_port: int
    pid: int
    """The process that holds the host listener (it ends with it)."""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.host_port}/"


class Ingress:
    """A sandbox's ingress directory and the host listeners this process holds for it."""

    def __init__(self, sandbox_id: str, net_dir: Path, inside: str = SANDBOX_INGRESS_DIR) -> None:
        self.sandbox_id = sandbox_id
        self.dir = net_dir / "in"
        self.inside = inside
        """Where the sandbox sees `dir`."""
        self.records = net_dir / "exposed"
        self._servers: dict[int, tuple[asyncio.AbstractServer, Exposure]] = {}

    def create(self) -> Ingress:
        """Make the directory the sandbox's runtime listens in (it writes there: uid 1000 on docker)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o777)
        return self

    @property
    def env(self) -> dict[str, str]:
        return {"HERMETIC_INGRESS_SOCKET": f"{self.inside}/{INGRESS_NAME}"}

    def expose(self, port: int, host: str = "127.0.0.1", host_port: int = 0) -> Exposure:
        """Listen on host:host_port (0: a free port) and carry each connection to `port` inside.
        Raises ExposeError."""
        if not 0 < port < 65536:
            raise ExposeError(f"not a port: {port}")
        if port in self._servers:
            return self._servers[port][1]
        if not (self.dir / INGRESS_NAME).exists():
            raise ExposeError(f"sandbox {self.sandbox_id} has no ingress socket (is it running?)")
        try:
            server = on_loop(asyncio.start_server(lambda r, w: self._carry(port, r, w), host, host_port))
        except OSError as exc:
            raise ExposeError(f"cannot listen on {host}:{host_port}: {exc.strerror or exc}") from None
        bound = server.sockets[0].getsockname()
        exposure = Exposure(port, host, int(bound[1]), os.getpid())
        self._servers[port] = (server, exposure)
        self.records.mkdir(parents=True, exist_ok=True)
        (self.records / f"{port}.json").write_text(json.dumps(asdict(exposure)))
        return exposure

    def unexpose(self, port: int) -> bool:
        """Close this process's listener for `port`; False when it holds none."""
        entry = self._servers.pop(port, None)
        if entry is None:
            return False
        on_loop(_close(entry[0]))
        (self.records / f"{port}.json").unlink(missing_ok=True)
        return True

    def close(self) -> None:
        """Close every listener (the sandbox is ending) and remove the directories."""
        for port in list(self._servers):
            self.unexpose(port)
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.records, ignore_errors=True)
        with contextlib.suppress(OSError):  # kept when it holds an egress log
            self.dir.parent.rmdir()

    async def _carry(self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        inner_writer = None
        try:
            inner_reader, inner_writer = await self._connect_inside()
            inner_writer.write(f"{port}\n".encode())
            await asyncio.gather(_copy(reader, inner_writer), _copy(inner_reader, writer))
        except OSError:
            pass  # the sandbox is gone or nothing listens: the client sees the connection close
        finally:
            writer.close()
            if inner_writer is not None:
                inner_writer.close()

    async def _connect_inside(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        fd = _open_socket_path(self.dir)
        try:
            return await asyncio.open_unix_connection(f"/proc/self/fd/{fd}", limit=CHUNK)
        finally:
            os.close(fd)

    def connect(self) -> socket.socket:
        """A blocking connection to the sandbox's ingress socket (for a first line of another kind than
        a port: `watch PATH`). Raises OSError when the sandbox is gone or has no ingress."""
        fd = _open_socket_path(self.dir)
        try:
            client = socket.socket(socket.AF_UNIX)
            try:
                client.connect(f"/proc/self/fd/{fd}")
            except OSError:
                client.close()
                raise
            return client
        finally:
            os.close(fd)


def _open_socket_path(directory: Path) -> int:
    """An O_PATH descriptor of the ingress socket, never through a link the sandbox planted."""
    fd = os.open(directory / INGRESS_NAME, os.O_PATH | os.O_NOFOLLOW)
    if not stat.S_ISSOCK(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{directory / INGRESS_NAME} is not a socket")
    return fd


def exposures(net_dir: Path) -> list[Exposure]:
    """Every exposure of a sandbox held by a live process (any process on this host)."""
    found = []
    for record in sorted((net_dir / "exposed").glob("*.json")):
        with contextlib.suppress(ValueError, TypeError, OSError):
            exposure = Exposure(**json.loads(record.read_text()))
            if _alive(exposure.pid):
                found.append(exposure)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _close(server: asyncio.AbstractServer) -> None:
    server.close()


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except ConnectionError:
        sink.close()
