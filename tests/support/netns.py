"""Upstream hosts for egress tests, in a network namespace this test run creates (names prefixed hm14).

The namespace `hm14-upXX` gets one end of a veth pair (`hm14-nXX`, 198.18.N.2/24); the host keeps the
other (`hm14-hXX`, 198.18.N.1/24), so the only route to 198.18.N.0/24 is that link (198.18.0.0/15 is
the benchmarking range: never routed on the internet; N is this run's slot). `tests/support/upstream.py`
serves HTTP and HTTPS (a throwaway CA from trustme) there. The egress proxy's resolver is pointed
at a table of test names. Nothing here sends a packet anywhere else; every start checks the route first.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from backends.network.policy import IPAddress
from backends.network.proxy import egress_proxy

# One slot per test run, so two runs on this machine never share a namespace, a link or a subnet.
SLOT = os.getpid() % 256
NS = f"hm14-up{SLOT:02x}"
HOST_IF, NS_IF = f"hm14-h{SLOT:02x}", f"hm14-n{SLOT:02x}"
HOST_ADDR, UPSTREAM = f"198.18.{SLOT}.1", f"198.18.{SLOT}.2"
NAMES = {
    "pypi.hm14.test": UPSTREAM,
    "git.hm14.test": UPSTREAM,
    "other.hm14.test": UPSTREAM,  # the same server, never on an allowlist
    "sub.wild.hm14.test": UPSTREAM,
    "data.hm14.test": UPSTREAM,  # the built-in evaluation suite's allowed host (evals/net-fetch-allowed)
    "loop.hm14.test": "127.0.0.1",  # names that lead home: refused unless a CIDR rule names the range
    "ten.hm14.test": "10.14.0.1",
    "void.hm14.test": f"198.18.{SLOT}.9",  # on the test's link, but nobody answers there
}
HERE = Path(__file__).resolve().parent


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class Upstream:
    """The namespace, its servers, the CA that signed their certificate, and the resolver table."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca = trustme.CA()
        self.ca_pem = root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_pem))
        cert = self.ca.issue_cert(*[n for n, a in NAMES.items() if a == UPSTREAM])
        cert.private_key_pem.write_to_path(str(root / "key.pem"))
        cert.cert_chain_pems[0].write_to_path(str(root / "cert.pem"))
        (root / "www").mkdir()
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        _ip("netns", "del", NS, check=False)  # a run killed before its teardown
        _ip("link", "del", HOST_IF, check=False)
        _ip("netns", "add", NS)
        _ip("link", "add", HOST_IF, "type", "veth", "peer", "name", NS_IF)
        _ip("link", "set", NS_IF, "netns", NS)
        _ip("addr", "add", f"{HOST_ADDR}/24", "dev", HOST_IF)
        _ip("link", "set", HOST_IF, "up")
        _ip("-n", NS, "addr", "add", f"{UPSTREAM}/24", "dev", NS_IF)
        _ip("-n", NS, "link", "set", NS_IF, "up")
        _ip("-n", NS, "link", "set", "lo", "up")
        route = _ip("route", "get", UPSTREAM).stdout
        if f"dev {HOST_IF}" not in route:  # never let a test packet take another way
            raise RuntimeError(f"the route to {UPSTREAM} is not via {HOST_IF}: {route}")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", NS, sys.executable, str(HERE / "upstream.py"), UPSTREAM, str(self.root)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the upstream servers did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        _ip("netns", "del", NS, check=False)  # takes the veth pair with it
        _ip("link", "del", HOST_IF, check=False)


async def test_resolver(host: str, port: int) -> list[IPAddress]:
    """The egress proxy's resolver during these tests: the table above, nothing else."""
    if host not in NAMES:
        raise OSError(f"{host}: no such test name")
    return [ipaddress.ip_address(NAMES[host])]


def netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "no `ip` (apt-get install iproute2)"
    return None


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)
    server = Upstream(tmp_path_factory.mktemp("hm14-upstream"))
    proxy = egress_proxy()
    previous = proxy.resolver
    try:
        server.start()
        proxy.resolver = test_resolver
        yield server
    finally:
        proxy.resolver = previous
        server.stop()
