"""Run inside a sandbox on `network: allowlist`: every way out that must fail, tried; prints JSON results.

Each probe reports what happened ("refused 403 ...", "error ENETUNREACH", "open"); the test decides.
"""

import json
import os
import socket
import ssl
import sys
import urllib.parse

PROXY = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
UPSTREAM, CA = sys.argv[1], sys.argv[2]


def proxy_request(head: bytes, via_socket: bool = False) -> str:
    """Send a request head to the proxy (through the bridge or straight at its Unix socket)."""
    if via_socket:
        sock = socket.socket(socket.AF_UNIX)
        sock.connect("/run/hermetic/egress.sock")  # the relay a program inside could build
    else:
        sock = socket.create_connection((PROXY.hostname, PROXY.port), timeout=10)
    sock.settimeout(10)
    with sock:
        sock.sendall(head)
        answer = sock.recv(4096).decode("latin-1")
    return answer.split("\r\n", 1)[0] or "closed"


def sni_mismatch() -> str:
    """CONNECT to an allowed host, then a TLS ClientHello naming another."""
    sock = socket.create_connection((PROXY.hostname, PROXY.port), timeout=10)
    sock.sendall(b"CONNECT pypi.hm14.test:443 HTTP/1.1\r\nHost: pypi.hm14.test:443\r\n\r\n")
    status = sock.recv(4096).decode().split("\r\n", 1)[0]
    context = ssl.create_default_context(cafile=CA)
    try:
        with context.wrap_socket(sock, server_hostname="other.hm14.test") as tls:
            tls.sendall(b"GET /host HTTP/1.1\r\nHost: other.hm14.test\r\n\r\n")
            return "open " + tls.recv(4096).decode()
    except (OSError, ssl.SSLError) as exc:
        return "%s; tls failed: %s" % (status, type(exc).__name__)


def direct(kind: int, address: str, port: int) -> str:
    sock = socket.socket(socket.AF_INET, kind)
    sock.settimeout(5)
    try:
        if kind == socket.SOCK_DGRAM:
            sock.sendto(b"ping", (address, port))
            return "sent"
        sock.connect((address, port))
        return "open"
    except OSError as exc:
        return "error %s" % (exc.errno and os.strerror(exc.errno) or exc)
    finally:
        sock.close()


def lookup(name: str) -> str:
    try:
        return "resolved %s" % socket.getaddrinfo(name, 443)[0][4][0]
    except OSError as exc:
        return "error %s" % exc


results = {
    "ip_literal": proxy_request(b"CONNECT %s:443 HTTP/1.1\r\n\r\n" % UPSTREAM.encode()),
    "loopback_name": proxy_request(b"CONNECT loop.hm14.test:443 HTTP/1.1\r\n\r\n"),
    "private_name": proxy_request(b"CONNECT ten.hm14.test:443 HTTP/1.1\r\n\r\n"),
    "sni_mismatch": sni_mismatch(),
    "host_mismatch": proxy_request(
        b"GET http://pypi.hm14.test/host HTTP/1.1\r\nHost: other.hm14.test\r\n\r\n"
    ),
    "userinfo": proxy_request(b"CONNECT a@b:443 HTTP/1.1\r\n\r\n"),
    "userinfo_url": proxy_request(b"GET http://pypi.hm14.test@other.hm14.test/ HTTP/1.1\r\nHost: x\r\n\r\n"),
    "trailing_dot_unknown": proxy_request(b"CONNECT x.:443 HTTP/1.1\r\n\r\n"),
    "v6_loopback": proxy_request(b"CONNECT [::1]:443 HTTP/1.1\r\n\r\n"),
    "direct_tcp": direct(socket.SOCK_STREAM, UPSTREAM, 80),
    "udp": direct(socket.SOCK_DGRAM, UPSTREAM, 53),
    "dns": lookup("pypi.hm14.test"),
    "relay_to_socket": proxy_request(b"CONNECT other.hm14.test:443 HTTP/1.1\r\n\r\n", via_socket=True),
}
print(json.dumps(results))
