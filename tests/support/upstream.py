"""Test upstream servers, run inside a network namespace the test created (`ip netns exec ...`).

`python upstream.py ADDRESS ROOT`: HTTP on ADDRESS:80 and HTTPS on ADDRESS:443 and :8443 (ROOT/cert.pem,
ROOT/key.pem from a throwaway CA) serving ROOT/www; `/host` answers with the Host header it got,
`/hang` never answers, `/bytes/N` with N zero bytes, `/auth` the SHA-256 of each Authorization header,
`/redirect/HOST:PORT/PATH` with a 302 to http://HOST:PORT/PATH.
Two plain TCP services for opaque tunnels: an echo on :7007 (the client speaks first) and a banner on
:2525 (the server speaks first, as SMTP does). Prints "ready" once all listen, and serves until killed.
"""

from __future__ import annotations

import hashlib
import http.server
import socketserver
import ssl
import sys
import threading
from functools import partial
from pathlib import Path


def send_zeros(handler: http.server.BaseHTTPRequestHandler, size: int) -> None:
    """Answer with `size` zero bytes, a megabyte per write (also bench.network's upstream)."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(size))
    handler.end_headers()
    block = bytes(1 << 20)
    while size > 0:
        handler.wfile.write(block[: min(size, len(block))])
        size -= len(block)


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == "/hang":  # answers never: for idle timeouts
            threading.Event().wait()
        elif self.path == "/host":
            self._send(f"host={self.headers.get('Host')}\n".encode())
        elif self.path == "/auth":  # a digest, never the value: a test searches for the value everywhere
            got = self.headers.get_all("Authorization") or []
            digests = ",".join(hashlib.sha256(value.encode()).hexdigest() for value in got)
            self._send(f"auth-sha256={digests or 'none'}\n".encode())
        elif self.path.startswith("/bytes/"):
            send_zeros(self, int(self.path.rsplit("/", 1)[1]))
        elif self.path.startswith("/redirect/"):  # a public host sending its client elsewhere
            self.send_response(302)
            self.send_header("Location", "http://" + self.path.removeprefix("/redirect/"))
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            super().do_GET()

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class Echo(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        for line in self.rfile:
            self.wfile.write(b"echo " + line)


class Banner(Echo):
    def handle(self) -> None:
        self.wfile.write(b"220 hm14 ready\r\n")
        super().handle()


def main() -> None:
    address, root = sys.argv[1], Path(sys.argv[2])
    handler = partial(Handler, directory=str(root / "www"))
    plain = http.server.ThreadingHTTPServer((address, 80), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(root / "cert.pem", root / "key.pem")
    secure = []
    for port in (443, 8443):
        server = http.server.ThreadingHTTPServer((address, port), handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        secure.append(server)
    raw = [
        socketserver.ThreadingTCPServer((address, 7007), Echo),
        socketserver.ThreadingTCPServer((address, 2525), Banner),
    ]
    for server in (plain, *secure, *raw):
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
