"""Bytes between two sockets: the client's socket taken over from the bridge, a buffered async reader for
the handshake, then a splice pump for the rest.

The sandbox's bridge (sandboxes/netbridge.py) hands the proxy each client's own socket, so the payload
crosses one process (this one) between the client and the upstream. The handshake (request head,
ClientHello) is read on the event loop. Once a tunnel is decided, each direction is copied by a thread
with splice(2) through a pipe, so the payload never enters Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
import struct
import threading

CHUNK = 1 << 20
F_SETPIPE_SZ = 1031


async def take_over(conn: socket.socket) -> tuple[socket.socket, bytes]:
    """The client's socket and its first bytes. The bridge sends one byte carrying its connection's
    descriptor (SCM_RIGHTS): that socket, `conn` closed. A peer that sends its stream itself (a client
    on the host, driving the socket as tests do) is served on `conn`. Raises IncompleteReadError at EOF,
    OSError for a descriptor that is not a stream socket or a truncated hand-over."""
    loop = asyncio.get_running_loop()
    readable: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not readable.done():
            readable.set_result(None)

    loop.add_reader(conn.fileno(), ready)
    try:
        await readable
    finally:
        loop.remove_reader(conn.fileno())
    data, fds, flags, _ = socket.recv_fds(conn, 65536, 1)
    if not fds:
        if flags & socket.MSG_CTRUNC:  # a descriptor came but did not fit (the kernel closed it)
            raise OSError("a hand-over without its descriptor")
        if not data:
            raise asyncio.IncompleteReadError(b"", None)
        return conn, data
    try:
        handed = socket.socket(fileno=fds[0])  # ENOTSOCK for anything but a socket
    except OSError:
        os.close(fds[0])
        raise
    if handed.type != socket.SOCK_STREAM or flags & socket.MSG_CTRUNC:
        handed.close()
        raise OSError("the bridge handed over something other than one stream socket")
    handed.setblocking(False)
    conn.close()
    return handed, b""


class SocketReader:
    """`readuntil` and `readexactly` over a non-blocking socket on the running loop, keeping what
    was read past the end (`leftover`) for the tunnel."""

    def __init__(self, sock: socket.socket, limit: int) -> None:
        self.sock = sock
        self.limit = limit
        self.buffer = bytearray()

    async def fill(self) -> None:
        """Read what the socket has (at least a byte). Raises IncompleteReadError at EOF."""
        data = await asyncio.get_running_loop().sock_recv(self.sock, 65536)
        if not data:
            raise asyncio.IncompleteReadError(bytes(self.buffer), None)
        self.buffer += data

    async def readuntil(self, separator: bytes) -> bytes:
        while (end := self.buffer.find(separator)) < 0:
            if len(self.buffer) > self.limit:
                raise asyncio.LimitOverrunError("request head too long", len(self.buffer))
            await self.fill()
        return self._take(end + len(separator))

    async def readexactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            await self.fill()
        return self._take(size)

    def leftover(self) -> bytes:
        return self._take(len(self.buffer))

    def _take(self, size: int) -> bytes:
        taken = bytes(self.buffer[:size])
        del self.buffer[:size]
        return taken


def _pump(source: socket.socket, sink: socket.socket, idle: float) -> int:
    """Copy `source` to `sink` until EOF or `idle` seconds without data; returns the bytes copied."""
    seconds = int(idle)
    source.setsockopt(
        socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", seconds, int((idle - seconds) * 1e6))
    )
    read_end, write_end = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(write_end, F_SETPIPE_SZ, CHUNK)
    total = 0
    try:
        while moved := os.splice(source.fileno(), write_end, CHUNK):
            total += moved
            while moved:
                moved -= os.splice(read_end, sink.fileno(), moved)
        sink.shutdown(socket.SHUT_WR)
    except OSError:  # a reset, or idle too long (EAGAIN after SO_RCVTIMEO): end both directions
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
    finally:
        os.close(read_end)
        os.close(write_end)
    return total


async def tunnel(client: socket.socket, upstream: socket.socket, idle: float) -> tuple[int, int]:
    """Carry both directions until both end; (bytes up, bytes down). Daemon threads: a process that
    exits never waits for a tunnel (shutting a socket down ends its pump at once)."""
    loop = asyncio.get_running_loop()
    for sock in (client, upstream):
        sock.setblocking(True)
    # a download's pump waits on the client less often with room for a few of its moves (the
    # autotuned buffer starts at 16 KB): a third less CPU per byte, measured by bench/network.py
    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * CHUNK)

    def run(source: socket.socket, sink: socket.socket) -> asyncio.Future[int]:
        done: asyncio.Future[int] = loop.create_future()

        def pump() -> None:
            moved = _pump(source, sink, idle)
            loop.call_soon_threadsafe(done.set_result, moved)

        threading.Thread(target=pump, name="egress-pump", daemon=True).start()
        return done

    up, down = run(client, upstream), run(upstream, client)
    return await up, await down
