"""A CONNECT to a host with a credential: TLS is terminated here with the sandbox CA's certificate for
that host, the request's head gets the credential's header (the client's own is dropped), and it goes on
over a second TLS connection whose certificate is checked against the host's trust store. One request
per connection (`Connection: close` both ways): every request on it carries the header, and no other
host's request can follow on it. Runs on a thread of its own (blocking sockets)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading

from .credentials import Credential, SandboxCA
from .policy import PolicyError, normalise_host, split_authority

HEAD_LIMIT = 64 * 1024
_DROP = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "upgrade"}


class InterceptError(Exception):
    """Why an intercepted connection was refused or ended early; `rule` is the audit log's code."""

    def __init__(self, rule: str, reason: str) -> None:
        super().__init__(reason)
        self.rule = rule


def _rewrite(head: bytes, credential: Credential, value: str) -> bytes:
    """The request head with the credential's header set and `Connection: close`. Raises InterceptError."""
    try:
        request_line, *lines = head.decode("latin-1")[:-4].split("\r\n")
        method, _, version = request_line.split(" ")
        headers = [line.split(":", 1) for line in lines]
        if any(len(h) != 2 for h in headers) or not version.startswith("HTTP/1."):
            raise ValueError("malformed")
    except ValueError:
        raise InterceptError("malformed", "not an HTTP/1.1 request inside the TLS tunnel") from None
    hosts = [v.strip() for n, v in headers if n.strip().lower() == "host"]
    try:
        named = normalise_host(split_authority(hosts[0])[0]) if len(hosts) == 1 else None
    except PolicyError:
        named = None
    if named != credential.host:
        raise InterceptError(
            "host-mismatch",
            f"a request in the tunnel to {credential.host} must name it in its one Host header",
        )
    header = credential.header.lower()
    kept = [f"{n}:{v}" for n, v in headers if n.strip().lower() not in _DROP | {header}]
    lines = [request_line, *kept, f"{credential.header}: {value}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


def _read_head(tls: ssl.SSLSocket) -> tuple[bytes, bytes]:
    data = b""
    while (end := data.find(b"\r\n\r\n")) < 0:
        if len(data) > HEAD_LIMIT:
            raise InterceptError("malformed", "request head too long")
        chunk = tls.recv(65536)
        if not chunk:
            raise InterceptError("protocol", "the client closed the tunnel before a request")
        data += chunk
    return data[: end + 4], data[end + 4 :]


def _copy(source: ssl.SSLSocket, sink: ssl.SSLSocket, counted: list[int]) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
            counted[0] += len(chunk)
    except (OSError, ssl.SSLError):
        pass
    finally:
        for sock in (source, sink):  # either side done: the one request is over
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def carry(
    client: socket.socket,
    upstream: socket.socket,
    credential: Credential,
    ca: SandboxCA,
    upstream_context: ssl.SSLContext,
    idle: float,
) -> tuple[int, int]:
    """Serve one intercepted connection; (bytes up, bytes down) of the HTTP inside. Raises InterceptError."""
    named: list[str | None] = []
    server_context = ca.contexts[credential.host]
    server_context.sni_callback = lambda sock, name, ctx: named.append(name)  # type: ignore[assignment]
    for sock in (client, upstream):
        sock.setblocking(True)
        sock.settimeout(idle)
    try:
        inside = server_context.wrap_socket(client, server_side=True)
    except (ssl.SSLError, OSError) as exc:
        raise InterceptError(
            "tls-refused",
            f"the client refused the sandbox CA's certificate for {credential.host} (does it pin the "
            f"certificate, or not trust the CA?): {exc}",
        ) from None
    with inside:
        if named != [credential.host]:
            raise InterceptError(
                "sni-mismatch",
                f"the TLS server name {named[0] if named else None!r} is not {credential.host!r}",
            )
        head, body = _read_head(inside)
        forward = _rewrite(head, credential, credential.resolve())
        try:
            outside = upstream_context.wrap_socket(upstream, server_hostname=credential.host)
        except (ssl.SSLError, OSError) as exc:
            raise InterceptError(
                "upstream-tls", f"{credential.host}'s certificate was refused: {exc}"
            ) from None
        with outside:
            outside.sendall(forward + body)
            up, down = [len(head) + len(body)], [0]
            pump = threading.Thread(target=_copy, args=(inside, outside, up), daemon=True)
            pump.start()
            _copy(outside, inside, down)
            pump.join(idle)
            return up[0], down[0]
