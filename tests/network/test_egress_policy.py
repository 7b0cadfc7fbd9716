"""The egress allowlist as pure code: rules, normalisation, the refused ranges, the advice."""

from __future__ import annotations

import ipaddress

import pytest
from pydantic import ValidationError

from backends import SandboxSpec
from backends.network.policy import (
    Denial,
    Policy,
    PolicyError,
    Target,
    advice,
    normalise_host,
    split_authority,
)
from backends.network.tls import server_name


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


def test_a_host_rule_allows_that_name_on_80_and_443_only() -> None:
    policy = Policy(["docs.python.org"])
    assert policy.check("docs.python.org", 443) == Target("docs.python.org", 443)
    assert policy.check("docs.python.org", 80) == Target("docs.python.org", 80)
    port = policy.check("docs.python.org", 8443)
    assert isinstance(port, Denial) and port.rule == "port"
    other = policy.check("python.org", 443)
    assert isinstance(other, Denial) and other.rule == "not-allowed"


def test_a_port_rule_replaces_the_default_ports() -> None:
    policy = Policy(["git.example.com:8443"])
    assert isinstance(policy.check("git.example.com", 8443), Target)
    assert isinstance(policy.check("git.example.com", 443), Denial)


def test_a_wildcard_matches_names_under_it_at_any_depth_but_not_itself() -> None:
    policy = Policy(["*.githubusercontent.com"])
    assert isinstance(policy.check("raw.githubusercontent.com", 443), Target)
    assert isinstance(policy.check("a.b.githubusercontent.com", 443), Target)
    assert isinstance(policy.check("githubusercontent.com", 443), Denial)
    assert isinstance(policy.check("evilgithubusercontent.com", 443), Denial)
    assert isinstance(policy.check("githubusercontent.com.evil.test", 443), Denial)


def test_names_are_compared_after_case_trailing_dot_and_idna_normalisation() -> None:
    policy = Policy(["Docs.Python.Org.", "bücher.example"])
    assert policy.check("DOCS.python.org.", 443) == Target("docs.python.org", 443)
    assert policy.check("xn--bcher-kva.example", 443) == Target("xn--bcher-kva.example", 443)
    assert policy.check("BÜCHER.example", 443) == Target("xn--bcher-kva.example", 443)


@pytest.mark.parametrize("host", ["a@b", "x..y", "", ".", "-x.test", "x y", "a/b", "x\x00.test", "%41.test"])
def test_malformed_hosts_are_refused_as_malformed(host: str) -> None:
    decision = Policy(["*.test", "x.test"]).check(host, 443)
    assert isinstance(decision, Denial) and decision.rule == "malformed", decision


def test_ip_literals_are_refused_unless_a_cidr_covers_them() -> None:
    policy = Policy(["198.18.14.0/24", "[2001:db8::/32]:8443"])
    assert policy.check("198.18.14.2", 443) == Target("198.18.14.2", 443, ip("198.18.14.2"))
    assert isinstance(policy.check("[2001:db8::1]", 8443), Target)
    for host, port in (("198.18.15.2", 443), ("[::1]", 443), ("127.0.0.1", 80), ("[2001:db8::1]", 443)):
        decision = policy.check(host, port)
        assert isinstance(decision, Denial) and decision.rule == "ip-literal", (host, decision)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.9.9.9",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fd00:ec2::254",
        "fe80::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "224.0.0.1",
    ],
)
def test_a_name_resolving_to_a_refused_range_is_refused(address: str) -> None:
    policy = Policy(["pypi.example"])
    target = policy.check("pypi.example", 443)
    assert isinstance(target, Target)
    decision = policy.admit(target, [ip(address)])
    assert isinstance(decision, Denial) and decision.rule == "private-address"


def test_a_cidr_lets_a_matched_name_into_its_range_but_admits_no_other_name() -> None:
    policy = Policy(["internal.example", "10.20.0.0/16"])
    target = policy.check("internal.example", 443)
    assert isinstance(target, Target)
    assert policy.admit(target, [ip("10.20.3.4")]) == [ip("10.20.3.4")]
    assert isinstance(policy.admit(target, [ip("10.21.0.1")]), Denial)
    assert isinstance(policy.check("other.example", 443), Denial)


def test_a_cidr_without_a_port_lets_a_matched_name_in_on_the_host_rules_port() -> None:
    """`fake-llm:8788` plus the compose network's range: the host rule chose the port, the CIDR only
    lifts the private-range refusal (before, it did so for 80 and 443 only, and 8788 was refused)."""
    policy = Policy(["fake-llm:8788", "10.213.7.0/24"])
    target = policy.check("fake-llm", 8788)
    assert isinstance(target, Target)
    assert policy.admit(target, [ip("10.213.7.2")]) == [ip("10.213.7.2")]
    literal = policy.check("10.213.7.2", 8788)  # an IP literal: the CIDR's own ports, 80 and 443
    assert isinstance(literal, Denial) and literal.rule == "ip-literal"


def test_a_cidr_with_a_port_lets_a_name_in_on_that_port_only_and_says_so() -> None:
    policy = Policy(["fake-llm:8788", "internal.example", "10.213.7.0/24:443"])
    inside = policy.check("internal.example", 443)
    assert isinstance(inside, Target) and policy.admit(inside, [ip("10.213.7.2")]) == [ip("10.213.7.2")]
    target = policy.check("fake-llm", 8788)
    assert isinstance(target, Target)
    decision = policy.admit(target, [ip("10.213.7.2")])
    assert isinstance(decision, Denial) and decision.rule == "private-address"
    assert "without a port or with port 8788 (not 443)" in decision.reason


def test_only_the_admitted_addresses_are_returned_in_order() -> None:
    policy = Policy(["mixed.example"])
    target = policy.check("mixed.example", 443)
    assert isinstance(target, Target)
    got = policy.admit(target, [ip("127.0.0.1"), ip("198.18.14.2"), ip("10.0.0.1"), ip("198.18.14.3")])
    assert got == [ip("198.18.14.2"), ip("198.18.14.3")]
    assert isinstance(policy.admit(target, []), Denial)


@pytest.mark.parametrize(
    "rule", ["https://pypi.org", "pypi.org:0", "pypi.org:http", "*", "a@b", "10.0.0.0/33"]
)
def test_a_bad_rule_is_refused_by_the_spec_naming_it(rule: str) -> None:
    with pytest.raises(ValidationError, match="allow rule"):
        SandboxSpec(network="allowlist", allow=[rule])
    with pytest.raises(PolicyError):
        Policy([rule])


def test_authorities_split_strictly() -> None:
    assert split_authority("x.test:443") == ("x.test", 443)
    assert split_authority("[::1]:443") == ("[::1]", 443)
    assert split_authority("x.test") == ("x.test", None)
    for bad in ("x.test:", "x.test:99999", "[::1]x", "x.test:+1"):
        with pytest.raises(PolicyError):
            split_authority(bad)
    assert normalise_host("[::1]") == "::1"


def test_advice_names_the_host_and_the_rule_an_operator_adds() -> None:
    policy = Policy([])
    denial = policy.check("docs.python.org", 443)
    assert isinstance(denial, Denial)
    assert advice("docs.python.org", 443, denial) == (
        "egress refused: docs.python.org:443 is not on this sandbox's allowlist; "
        "an operator allows it by adding `docs.python.org` to sandbox.allow"
    )
    other = policy.check("git.example", 8443)
    assert isinstance(other, Denial)
    assert "adding `git.example:8443`" in advice("git.example", 8443, other)


def _client_hello(name: bytes | None) -> bytes:
    extensions = b""
    if name is not None:
        entry = b"\x00" + len(name).to_bytes(2, "big") + name
        body = len(entry).to_bytes(2, "big") + entry
        extensions = b"\x00\x00" + len(body).to_bytes(2, "big") + body
    return (
        b"\x03\x03"
        + bytes(32)
        + b"\x00"
        + b"\x00\x02\x13\x01"
        + b"\x01\x00"
        + len(extensions).to_bytes(2, "big")
        + extensions
    )


def test_the_server_name_is_read_from_a_client_hello() -> None:
    assert server_name(_client_hello(b"pypi.example")) == "pypi.example"
    assert server_name(_client_hello(None)) is None


def test_the_server_name_of_a_real_client_hello_is_read() -> None:
    """A ClientHello from Python's own TLS stack (OpenSSL), read the way the proxy reads the tunnel."""
    import asyncio
    import ssl

    from backends.network.tls import read_client_hello

    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="Pypi.Example")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()

    async def parse() -> tuple[bytes, str | None]:
        reader = asyncio.StreamReader()
        reader.feed_data(hello + b"after")
        return await read_client_hello(reader)

    raw, name = asyncio.run(parse())
    assert raw == hello and name == "Pypi.Example"
