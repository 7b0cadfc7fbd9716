"""network: allowlist on local and Docker, against upstream servers in a namespace the test creates.

The sandbox's network stays none; its one way out is the egress proxy's socket. Allowed hosts work
(curl, pip, git), everything else is refused with the fix in words, and every bypass fails.
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import get_backend
from netns import UPSTREAM, Upstream
from network_kit import publish_index

from backends import Sandbox, SandboxSpec, UnsupportedSpec
from backends.network import read_audit
from backends.network.proxy import egress_proxy

SUPPORT = Path(__file__).resolve().parents[1] / "support"
ALLOW = ["pypi.hm14.test", "git.hm14.test", "*.wild.hm14.test", "loop.hm14.test", "ten.hm14.test"]
CA = "/tmp/hm14-ca.pem"
BROWSER_IMAGE = "hermetic-sandbox:browser"


@pytest.fixture(params=["local", "docker", "ssh", "modal-standin"], scope="module")
def allowed(request: pytest.FixtureRequest, upstream: Upstream) -> Iterator[Sandbox]:
    """A sandbox on network: allowlist with the test hosts, the test CA at /tmp/hm14-ca.pem."""
    backend = get_backend(request.param)
    if request.param == "modal-standin":
        pytest.skip(
            "Modal enforces its own outbound_domain_allowlist/outbound_cidr_allowlist (port 443 only); "
            "test_modal.py checks the mapping, and the stand-in has no network to restrict"
        )
    spec = SandboxSpec(network="allowlist", allow=ALLOW, memory="512m", pids=256)
    if request.param == "ssh":
        with pytest.raises(UnsupportedSpec, match="remote user's network"):
            backend.create(spec)
        pytest.skip("ssh: the remote user's network is theirs, so `allowlist` is refused (asserted above)")
    publish_index(upstream)
    with backend.create(spec) as sb:
        sb.upload(upstream.ca_pem, "/tmp")
        sb.run(f"mv /tmp/ca.pem {CA}")
        sb.upload(SUPPORT / "egress_probe.py", "/tmp")
        yield sb


def _sh(sb: Sandbox, command: str) -> str:
    return str(sb.run(command, timeout=60)["output"])


def test_the_shell_carries_the_proxy_variables_every_common_tool_reads(allowed: Sandbox) -> None:
    env = dict(line.split("=", 1) for line in _sh(allowed, "env").splitlines() if "=" in line)
    proxy = env["HTTPS_PROXY"]
    assert proxy.startswith("http://127.0.0.1:")
    for name in ("HTTP_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "PIP_PROXY"):
        assert env[name] == proxy, name
    assert env["npm_config_proxy"] == env["npm_config_https_proxy"] == proxy
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"
    assert _sh(allowed, "git config --get http.proxy").strip() == proxy
    assert "HERMETIC_EGRESS_SOCKET" not in env, "the runtime's own variables stay out of the shell"


def test_an_allowed_host_answers_over_http_and_https(allowed: Sandbox) -> None:
    assert _sh(allowed, "curl -sS http://pypi.hm14.test/host") == "host=pypi.hm14.test\n"
    assert _sh(allowed, f"curl -sS --cacert {CA} https://pypi.hm14.test/host") == "host=pypi.hm14.test\n"
    assert (
        _sh(allowed, f"curl -sS --cacert {CA} https://sub.wild.hm14.test/host") == "host=sub.wild.hm14.test\n"
    )
    tls = [e for e in read_audit(allowed.id) if e.get("allowed") and e["port"] == 443]
    assert {"host": "pypi.hm14.test", "method": "CONNECT", "address": UPSTREAM}.items() <= tls[0].items()
    assert tls[0]["bytes_down"] > 1000 and tls[0]["bytes_up"] > 100 and "duration" in tls[0]


def test_git_clones_over_https_through_the_proxy(allowed: Sandbox) -> None:
    out = _sh(
        allowed,
        f"git -c http.sslCAInfo={CA} clone -q https://git.hm14.test/repo.git /tmp/repo; cat /tmp/repo/README",
    )
    assert out.endswith("cloned through the egress proxy\n"), out


def test_pip_downloads_from_an_allowed_index(allowed: Sandbox) -> None:
    if "No module named pip" in _sh(allowed, "python3 -m pip --version 2>&1"):
        pytest.skip(f"no pip in this sandbox's python ({allowed.backend}; the slim image has none)")
    out = _sh(
        allowed,
        f"python3 -m pip download -q --no-deps --cert {CA} --index-url https://pypi.hm14.test/simple "
        "-d /tmp/dl hm14demo 2>&1; ls /tmp/dl",
    )
    assert out.strip().endswith("hm14demo-1.0-py3-none-any.whl"), out


def test_a_host_not_on_the_list_is_refused_with_the_fix_in_words(allowed: Sandbox) -> None:
    allowed.egress.take_denials()  # type: ignore[union-attr]
    result = allowed.run(f"curl -sS --cacert {CA} https://other.hm14.test/host", timeout=60)
    assert result["exit_code"] != 0 and "403" in result["output"]
    plain = _sh(allowed, "curl -sS http://other.hm14.test/host")
    advice = "other.hm14.test:80 is not on this sandbox's allowlist; an operator allows it by adding "
    assert advice + "`other.hm14.test`" in plain
    denials = allowed.egress.take_denials()  # type: ignore[union-attr]
    assert len(denials) == 2 and "adding `other.hm14.test` to sandbox.allow" in denials[0]
    last = read_audit(allowed.id)[-1]
    assert last["host"] == "other.hm14.test" and last["allowed"] is False and last["denied"] == "not-allowed"


def test_every_bypass_attempt_fails(allowed: Sandbox) -> None:
    got = json.loads(_sh(allowed, f"python3 /tmp/egress_probe.py {UPSTREAM} {CA}"))
    forbidden = "HTTP/1.1 403 Forbidden"
    assert got["ip_literal"] == forbidden
    assert got["loopback_name"] == forbidden and got["private_name"] == forbidden
    assert got["sni_mismatch"].startswith("HTTP/1.1 200") and "tls failed" in got["sni_mismatch"]
    assert got["host_mismatch"] == "HTTP/1.1 400 Bad Request"
    assert got["userinfo"] == got["userinfo_url"] == "HTTP/1.1 400 Bad Request"
    assert got["trailing_dot_unknown"] == forbidden and got["v6_loopback"] == forbidden
    assert got["direct_tcp"] == "error Network is unreachable"
    assert got["udp"] == "error Network is unreachable"
    assert got["dns"].startswith("error")
    assert got["relay_to_socket"] == forbidden
    denied = {e["denied"] for e in read_audit(allowed.id) if not e.get("allowed")}
    assert {"ip-literal", "private-address", "sni-mismatch", "host-mismatch", "malformed"} <= denied


def test_the_proxy_down_means_no_network_and_the_sandbox_still_works(
    allowed: Sandbox,
    upstream: Upstream,
) -> None:
    proxy = egress_proxy()
    tunnel = _through_the_socket(allowed, b"CONNECT pypi.hm14.test:443 HTTP/1.1\r\n\r\n")
    assert tunnel.recv(4096).startswith(b"HTTP/1.1 200")
    tls = ssl.create_default_context(cafile=str(upstream.ca_pem)).wrap_socket(
        tunnel, server_hostname="pypi.hm14.test"
    )  # the handshake done: the tunnel is carrying
    proxy.stop()
    try:
        with tls:  # a stopped proxy ends the tunnels it was carrying (an EOF without close_notify)
            assert tls.recv(4096) == b""
        down = allowed.run("curl -sS -m 10 http://pypi.hm14.test/host", timeout=60)
        assert down["exit_code"] != 0 and "host=" not in down["output"]
        assert _sh(allowed, "echo still here") == "still here\n"
    finally:
        proxy.start()
    assert _sh(allowed, "curl -sS http://pypi.hm14.test/host") == "host=pypi.hm14.test\n"


def test_the_socket_directory_goes_with_the_sandbox(upstream: Upstream) -> None:
    backend = get_backend("local")
    with backend.create(SandboxSpec(network="allowlist", allow=["pypi.hm14.test"])) as sb:
        assert sb.egress is not None
        socket_dir = sb.egress.socket_dir
        assert (socket_dir / "egress.sock").exists()
    assert not socket_dir.parent.exists(), "no traffic, no audit log: nothing is left behind"


def test_the_in_sandbox_browser_goes_through_the_proxy(allowed: Sandbox, upstream: Upstream) -> None:
    backend = get_backend(allowed.backend)
    if allowed.backend == "docker":
        backend.ensure_image(BROWSER_IMAGE)  # type: ignore[attr-defined]
    spec = SandboxSpec(image=BROWSER_IMAGE, network="allowlist", allow=ALLOW, memory="1g", pids=512)
    with backend.create(spec) as sb:
        page = sb.call("browser.navigate", {"url": "http://pypi.hm14.test/host"}, timeout=120)
        assert page["status"] == 200 and "host=pypi.hm14.test" in page["snapshot"]
        refused = sb.call("browser.navigate", {"url": "http://other.hm14.test/host"}, timeout=120)
        assert refused["status"] == 403 and "sandbox.allow" in refused["snapshot"]
        decisions = {(e["host"], e["allowed"]) for e in read_audit(sb.id)}
        assert {("pypi.hm14.test", True), ("other.hm14.test", False)} <= decisions
        # Chromium's own background requests (update checks) also met the allowlist, and were refused
        assert {host for host, allowed in decisions if allowed} == {"pypi.hm14.test"}, decisions


def _through_the_socket(sb: Sandbox, head: bytes) -> socket.socket:
    """A connection to the sandbox's egress socket from the host side, as the bridge inside makes it."""
    assert sb.egress is not None
    client = socket.socket(socket.AF_UNIX)
    client.settimeout(30)
    client.connect(str(sb.egress.socket_dir / "egress.sock"))
    client.sendall(head)
    return client


def test_connect_and_idle_timeouts_close_what_hangs(allowed: Sandbox) -> None:
    proxy = egress_proxy()
    saved = proxy.connect_timeout, proxy.idle_timeout
    proxy.connect_timeout, proxy.idle_timeout = 0.5, 0.5
    allowed.egress.allow(["void.hm14.test"])  # type: ignore[union-attr]
    try:
        with _through_the_socket(allowed, b"CONNECT void.hm14.test:443 HTTP/1.1\r\n\r\n") as hung:
            assert hung.recv(4096).startswith(b"HTTP/1.1 502 Bad Gateway")
        waiting = b"GET http://pypi.hm14.test/hang HTTP/1.1\r\nHost: pypi.hm14.test\r\n\r\n"
        with _through_the_socket(allowed, waiting) as idle:  # the upstream never answers
            assert idle.recv(4096) == b"", "an idle connection is closed by the proxy"
        with _through_the_socket(allowed, b"CONNECT pypi.hm14.test:80 HTTP/1.1\r\n\r\n") as opaque:
            assert opaque.recv(4096).startswith(b"HTTP/1.1 403 Forbidden")
    finally:
        proxy.connect_timeout, proxy.idle_timeout = saved
    denied = [e for e in read_audit(allowed.id) if e.get("host") == "void.hm14.test"]
    assert denied[-1]["denied"] == "connect-failed"
