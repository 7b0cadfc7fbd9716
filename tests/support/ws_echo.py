"""Run inside a sandbox: a WebSocket echo server (RFC 6455, stdlib only) on 127.0.0.1:PORT."""

import base64
import hashlib
import socket
import struct
import sys
import threading

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def frame(opcode, payload):
    size = len(payload)
    head = (
        bytes([0x80 | opcode, size]) if size < 126 else bytes([0x80 | opcode, 126]) + struct.pack(">H", size)
    )
    return head + payload


def serve(conn):
    head = b""
    while b"\r\n\r\n" not in head:
        head += conn.recv(4096)
    lines = head.decode().split("\r\n")
    key = [line.split(":", 1)[1].strip() for line in lines if line.lower().startswith("sec-websocket-key")][0]
    accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
    conn.sendall(
        (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Accept: %s\r\n\r\n" % accept
        ).encode()
    )
    stream = conn.makefile("rb")
    while True:
        first, second = stream.read(2)
        size = second & 0x7F
        if size == 126:
            size = struct.unpack(">H", stream.read(2))[0]
        elif size == 127:
            size = struct.unpack(">Q", stream.read(8))[0]
        mask = stream.read(4) if second & 0x80 else bytes(4)
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(stream.read(size)))
        opcode = first & 0x0F
        if opcode == 8:
            conn.sendall(frame(8, payload[:2]))
            conn.close()
            return
        if opcode == 1:
            conn.sendall(frame(1, b"echo: " + payload))


listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", int(sys.argv[1])))
listener.listen(8)
while True:
    client, _ = listener.accept()
    threading.Thread(target=serve, args=(client,), daemon=True).start()
