"""CONNECT tunnels on ports other than 443: TLS is recognised by its first bytes and its server name
checked on any port (no domain fronting through an allowed `host:8443`); non-TLS protocols stay opaque.

The proxy is attached for a sandbox id of the test's own, and driven from the host side through its
Unix socket, as the bridge inside a sandbox drives it; the upstreams run in the test's namespace.
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from netns import Upstream

from backends.network import Egress, read_audit

RULES = ["pypi.hm14.test:8443", "pypi.hm14.test:7007", "pypi.hm14.test:2525"]


@pytest.fixture
def egress(tmp_path: Path, upstream: Upstream) -> Iterator[Egress]:
    attached = Egress.attach("hm14-tunnels", RULES, root=tmp_path)
    try:
        yield attached
    finally:
        attached.close()


def _tunnel(egress: Egress, authority: str) -> socket.socket:
    client = socket.socket(socket.AF_UNIX)
    client.settimeout(20)
    client.connect(str(egress.socket_dir / "egress.sock"))
    client.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    assert client.recv(4096).startswith(b"HTTP/1.1 200"), authority
    return client


def _decision(egress: Egress, port: int) -> dict[str, Any]:
    """The audit entry of the tunnel to `port`, written by the proxy once both directions ended."""
    deadline = time.monotonic() + 20
    while not (
        entries := [e for e in read_audit(egress.sandbox_id, egress.audit.parent.parent) if e["port"] == port]
    ):
        assert time.monotonic() < deadline, f"no decision for port {port} in the audit log"
        time.sleep(0.02)
    return entries[-1]


def _https_get(egress: Egress, ca: Path, server_name: str) -> bytes:
    tls = ssl.create_default_context(cafile=str(ca)).wrap_socket(
        _tunnel(egress, "pypi.hm14.test:8443"), server_hostname=server_name
    )
    with tls:
        tls.sendall(f"GET /host HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := tls.recv(4096):  # to the end: the upstream closes (Connection: close)
            answer += chunk
        return answer


def test_tls_to_another_server_name_on_a_non_443_port_is_refused(egress: Egress, upstream: Upstream) -> None:
    with pytest.raises((ssl.SSLError, OSError)):
        _https_get(egress, upstream.ca_pem, "other.hm14.test")  # the upstream would serve it: fronting
    refused = _decision(egress, 8443)
    assert refused["port"] == 8443 and refused["allowed"] is False and refused["denied"] == "sni-mismatch"


def test_tls_with_the_connect_host_as_server_name_is_carried_on_any_port(
    egress: Egress,
    upstream: Upstream,
) -> None:
    assert _https_get(egress, upstream.ca_pem, "pypi.hm14.test").endswith(b"host=pypi.hm14.test\n")
    carried = _decision(egress, 8443)
    assert carried["port"] == 8443 and carried["allowed"] is True and carried["tls"] is True


def test_a_protocol_where_the_client_speaks_first_but_not_tls_stays_an_opaque_tunnel(egress: Egress) -> None:
    with _tunnel(egress, "pypi.hm14.test:7007") as raw:
        raw.sendall(b"hello\r\n")
        assert raw.recv(4096) == b"echo hello\r\n"
    carried = _decision(egress, 7007)
    assert carried["allowed"] is True and "tls" not in carried


def test_a_protocol_where_the_server_speaks_first_stays_an_opaque_tunnel(egress: Egress) -> None:
    with _tunnel(egress, "pypi.hm14.test:2525") as raw:
        assert raw.recv(4096) == b"220 hm14 ready\r\n"  # the proxy did not wait for the client
        raw.sendall(b"EHLO x\r\n")
        assert raw.recv(4096) == b"echo EHLO x\r\n"
    carried = _decision(egress, 2525)
    assert carried["allowed"] is True and "tls" not in carried


def _hand_over(egress: Egress, fd: int) -> socket.socket:
    """What the sandbox's bridge does with each connection it accepts: one byte carrying `fd`."""
    conn = socket.socket(socket.AF_UNIX)
    conn.settimeout(20)
    conn.connect(str(egress.socket_dir / "egress.sock"))
    socket.send_fds(conn, [b"\0"], [fd])
    return conn


def test_a_handed_over_socket_is_served_by_the_proxy_itself(egress: Egress) -> None:
    ours, handed = socket.socketpair()
    with ours, _hand_over(egress, handed.fileno()) as conn:
        handed.close()  # as the bridge does: the proxy now holds the only other end
        assert conn.recv(1) == b"", "the proxy lets go of the connection that carried the socket"
        ours.settimeout(20)
        ours.sendall(b"CONNECT pypi.hm14.test:7007 HTTP/1.1\r\nHost: pypi.hm14.test:7007\r\n\r\n")
        assert ours.recv(4096).startswith(b"HTTP/1.1 200")
        ours.sendall(b"hello\r\n")
        assert ours.recv(4096) == b"echo hello\r\n"
    assert _decision(egress, 7007)["allowed"] is True


def test_a_handed_over_descriptor_that_is_no_stream_socket_is_closed(egress: Egress) -> None:
    read_end, write_end = os.pipe()
    try:
        with _hand_over(egress, write_end) as conn:
            assert conn.recv(1) == b"", "the proxy closes the connection"
        os.close(write_end)
        assert select.select([read_end], [], [], 20)[0], "the proxy closed its copy of the write end"
        assert os.read(read_end, 1) == b"", "and wrote nothing to it"
    finally:
        os.close(read_end)
    with _tunnel(egress, "pypi.hm14.test:7007") as raw:  # and serves on
        raw.sendall(b"hello\r\n")
        assert raw.recv(4096) == b"echo hello\r\n"
