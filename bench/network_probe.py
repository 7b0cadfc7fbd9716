"""Run inside a sandbox by bench/network.py: time requests to the upstream, direct or through the proxy.

`python3 network_probe.py PORT N BULK_BYTES [PROXY_PORT]` prints JSON: `setup` (seconds per fresh
connection to the first byte of a small answer, N samples) and `bulk` (seconds for BULK_BYTES).
With PROXY_PORT the connection is a CONNECT tunnel through the sandbox's egress bridge.
"""

import json
import socket
import sys
import time

PORT, N, BULK = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
PROXY = int(sys.argv[4]) if len(sys.argv) > 4 else None


def connection() -> socket.socket:
    if PROXY is None:
        return socket.create_connection(("127.0.0.1", PORT))
    sock = socket.create_connection(("127.0.0.1", PROXY))
    sock.sendall(b"CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (PORT, PORT))
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(4096)
    if not answer.startswith(b"HTTP/1.1 200"):
        raise SystemExit("proxy refused: %r" % answer[:200])
    return sock


def fetch(path: str) -> int:
    sock = connection()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n" % path.encode())
    total = 0
    buffer = bytearray(1 << 20)
    while True:
        got = sock.recv_into(buffer)
        if not got:
            break
        total += got
    sock.close()
    return total


setup = []
for _ in range(N + 3):
    start = time.perf_counter()
    fetch("/bytes/16")
    setup.append(time.perf_counter() - start)
start = time.perf_counter()
received = fetch("/bytes/%d" % BULK)
bulk = time.perf_counter() - start
if received < BULK:
    raise SystemExit("bulk download short: %d of %d bytes" % (received, BULK))
print(json.dumps({"setup": setup[3:], "bulk": bulk}))
