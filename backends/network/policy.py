"""The egress allowlist as pure code: rules parsed once, hosts normalised, every decision explained.

Rules (a sandbox's `allow`):
- `docs.python.org`: that name, ports 80 and 443.
- `*.githubusercontent.com`: any name *under* it, at any depth; not `githubusercontent.com` itself
  (list both to allow both).
- `host:8443`, `*.x:8443`: that port only, instead of 80 and 443.
- `@python`, `@node`, `@github`, `@debian`: a named preset (presets.py).
- `203.0.113.0/24`, `203.0.113.7`, `[2001:db8::/32]:8443`: a CIDR admits IP literals in the range (on
  80 and 443, or its port) and lets a name that matched a host rule resolve into it, even where the
  range is otherwise refused (loopback, private, ...): on the port the host rule allowed, or only on
  the CIDR's own port when it has one. A CIDR never admits a name that matched no host rule.

A decision is made twice: on the name (`check`), then on the addresses it resolved to (`admit`), so
the proxy connects to an address this module accepted and nothing else.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

import idna

from .presets import UnknownPreset, expand

DEFAULT_PORTS = frozenset({80, 443})
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Refused as a destination unless a CIDR rule names the range: a name must not lead into the
# host, its LAN, or a cloud's metadata service.
REFUSED_RANGES: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "CGNAT"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata)"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.168.0.0/16", "private"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("fc00::/7", "unique-local (incl. fd00:ec2::254 metadata)"),
    ("fe80::/10", "link-local"),
    ("ff00::/8", "multicast"),
)
_REFUSED = tuple((ipaddress.ip_network(net), why) for net, why in REFUSED_RANGES)
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


class PolicyError(ValueError):
    """A rule that cannot be parsed; the message says what is wrong and what is accepted."""


@dataclass(frozen=True)
class Denial:
    """Why a destination was refused: `rule` is a short code for logs, `reason` a sentence for people."""

    rule: str
    reason: str


@dataclass(frozen=True)
class Target:
    """A destination that passed the name check; `literal` is set when the host is an IP address."""

    host: str
    port: int
    literal: IPAddress | None = None


@dataclass(frozen=True)
class HostRule:
    name: str
    """A normalised name, or `*.` and the normalised suffix."""
    ports: frozenset[int]

    def matches(self, host: str, port: int) -> bool:
        if port not in self.ports:
            return False
        if self.name.startswith("*."):
            return host.endswith(self.name[1:])
        return host == self.name


@dataclass(frozen=True)
class CidrRule:
    network: IPNetwork
    port: int | None
    """The rule's own port; None: 80 and 443 for an IP literal, any port a host rule allowed for a name."""

    def covers(self, address: IPAddress) -> bool:
        return address.version == self.network.version and address in self.network

    def admits_literal(self, address: IPAddress, port: int) -> bool:
        return port in (DEFAULT_PORTS if self.port is None else {self.port}) and self.covers(address)

    def admits_name_into(self, address: IPAddress, port: int) -> bool:
        """For a name a host rule let through on `port` (the host rule chose the port)."""
        return self.port in (None, port) and self.covers(address)


def normalise_host(raw: str) -> str:
    """A host name in its one comparable form: lower case, no trailing dot, IDNA (punycode) labels.

    IP literals come back as their canonical text (`[::1]` -> `::1`). Raises PolicyError.
    """
    host = raw.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if host.endswith("."):
        host = host[:-1]
    if not host or any(c in host for c in "@/\\:%[] ") or not host.isprintable():
        raise PolicyError(f"not a host name: {raw!r}")
    try:
        host = idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError as exc:
        raise PolicyError(f"not a host name: {raw!r} ({exc})") from None
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise PolicyError(f"not a host name: {raw!r}")
    return host


def split_authority(authority: str) -> tuple[str, int | None]:
    """`host:port`, `[v6]:port` or a bare host -> (host, port or None). Raises PolicyError."""
    if authority.startswith("["):
        host, sep, rest = authority.partition("]")
        host += "]"
        if rest and not rest.startswith(":"):
            raise PolicyError(f"not a host and port: {authority!r}")
        port_text = rest[1:] if rest else None
    elif authority.count(":") == 1:
        host, _, port_text = authority.partition(":")
    else:
        host, port_text = authority, None
    if port_text is None:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise PolicyError(f"not a port: {port_text!r} in {authority!r}")
    return host, int(port_text)


def refused_range(address: IPAddress) -> str | None:
    """What kind of range refuses `address` by default (IPv4-mapped IPv6 checked as IPv4), or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for network, why in _REFUSED:
        if address.version == network.version and address in network:
            return why
    return None


class Policy:
    """A parsed allowlist. Raises PolicyError on a bad rule, naming it."""

    def __init__(self, rules: list[str]) -> None:
        self.rules = list(rules)
        self.hosts: list[HostRule] = []
        self.cidrs: list[CidrRule] = []
        try:
            expanded = expand(rules)
        except UnknownPreset as exc:
            raise PolicyError(str(exc)) from None
        for rule in expanded:
            self._add(rule.strip())

    def _add(self, rule: str) -> None:
        bracketed = re.fullmatch(r"\[([0-9a-fA-F:.]+(?:/\d+)?)\](?::(\d+))?", rule)
        text, port_text = (bracketed.group(1), bracketed.group(2)) if bracketed else (rule, None)
        if not bracketed and text.count(":") == 1:
            text, _, port_text = text.partition(":")
        port: int | None = None
        if port_text is not None:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise PolicyError(f"allow rule {rule!r}: {port_text!r} is not a port")
            port = int(port_text)
        try:
            self.cidrs.append(CidrRule(ipaddress.ip_network(text, strict=False), port))
            return
        except ValueError:
            if bracketed or ":" in text:
                raise PolicyError(f"allow rule {rule!r}: not an IP range") from None
        wildcard = text.startswith("*.")
        try:
            name = normalise_host(text[2:] if wildcard else text)
        except PolicyError:
            raise PolicyError(
                f"allow rule {rule!r}: use a host (docs.python.org), a wildcard (*.example.com), "
                "either with :PORT, or a CIDR (203.0.113.0/24)"
            ) from None
        self.hosts.append(
            HostRule(f"*.{name}" if wildcard else name, DEFAULT_PORTS if port is None else frozenset({port}))
        )

    def check(self, host: str, port: int) -> Target | Denial:
        """The name check: is `host:port` on the list at all (before any lookup)?"""
        try:
            name = normalise_host(host)
        except PolicyError as exc:
            return Denial("malformed", str(exc))
        try:
            literal: IPAddress | None = ipaddress.ip_address(name)
        except ValueError:
            literal = None
        if literal is not None:
            if any(rule.admits_literal(literal, port) for rule in self.cidrs):
                return Target(name, port, literal)
            return Denial(
                "ip-literal",
                f"{_show(name, port)}: an IP address is refused unless a CIDR rule covers it",
            )
        if any(rule.matches(name, port) for rule in self.hosts):
            return Target(name, port)
        if any(rule.matches(name, next(iter(rule.ports))) for rule in self.hosts):
            return Denial("port", f"{_show(name, port)}: port {port} is not allowed for {name}")
        return Denial("not-allowed", f"{_show(name, port)} is not on this sandbox's allowlist")

    def admit(self, target: Target, addresses: list[IPAddress]) -> list[IPAddress] | Denial:
        """The address check: of what `target` resolved to, the addresses it may connect to, in order."""
        admitted, refused, other_port = [], [], set()
        for address in addresses:
            why = refused_range(address)
            if why is None or any(rule.admits_name_into(address, target.port) for rule in self.cidrs):
                admitted.append(address)
                continue
            refused.append(f"{address} ({why})")
            other_port |= {str(rule.port) for rule in self.cidrs if rule.covers(address)}
        if admitted:
            return admitted
        if not refused:
            return Denial("unresolved", f"{target.host} did not resolve")
        unless = "unless a CIDR rule names that range"
        if other_port:  # a CIDR covers the range, for another port only
            unless = (
                f"{unless} without a port or with port {target.port} (not {', '.join(sorted(other_port))})"
            )
        return Denial("private-address", f"{target.host} resolves to {', '.join(refused)}, refused {unless}")


def advice(host: str, port: int, denial: Denial) -> str:
    """What the agent is told about a refusal: the host, the reason, and how an operator allows it."""
    fixes = {
        "not-allowed": host if port in DEFAULT_PORTS else f"{host}:{port}",
        "port": f"{host}:{port}",
        "ip-literal": (f"{host}/32" if "." in host else f"[{host}/128]")
        + ("" if port in DEFAULT_PORTS else f":{port}"),
        "private-address": "a CIDR rule for that range",
    }
    if denial.rule not in fixes:
        return f"egress refused: {denial.reason}"
    fix = fixes[denial.rule]
    return f"egress refused: {denial.reason}; an operator allows it by adding `{fix}` to sandbox.allow"


def _show(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
