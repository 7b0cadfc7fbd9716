"""Where a fetch made for the HTTP API may connect: never into the server's own network.

A token holder names the URL, so without this the server would probe its loopback, its LAN and the
cloud's metadata service for them. The ranges are the egress policy's (backends/network/policy.py):
loopback, private, link-local (metadata), CGNAT, multicast, reserved. The check is made on the address
actually connected to, at every connection: urllib's connections resolve the name here, admit the
addresses outside those ranges and connect to one of them (so a redirect to 127.0.0.1 is refused when
it is followed); git is given the checked address (`http.curloptResolve`, resolve-and-pin) and follows
no redirect (`http.followRedirects=false`), and a git:// URL is rewritten to the checked address.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import urllib.parse
import urllib.request
from typing import Any

from backends.network.policy import IPAddress, refused_range


class PrivateAddress(ValueError):
    """A URL whose host is (or resolves only to) an address in a refused range; the message says which."""


def admitted(host: str, port: int) -> list[IPAddress]:
    """The addresses of `host` a fetch may connect to, in resolver order; raises PrivateAddress (none is
    outside the refused ranges) or OSError (the name does not resolve)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
    allowed = [a for a in addresses if refused_range(a) is None]
    if not allowed:
        refused = ", ".join(f"{a} ({refused_range(a)})" for a in addresses)
        said = (
            f"{host} is {refused}"
            if [str(a) for a in addresses] == [host]
            else f"{host} resolves to {refused}"
        )
        raise PrivateAddress(
            f"{said}: over the HTTP API a source must be on another machine's public "
            "address (an operator allows private ones with skill_install.allow_private_urls)"
        )
    return allowed


def _connect(address: tuple[str, int], timeout: Any = None, source_address: Any = None) -> socket.socket:
    """socket.create_connection, to an admitted address of the host only."""
    host, port = address
    last: OSError | None = None
    for ip in admitted(host, port):
        try:
            return socket.create_connection((str(ip), port), timeout, source_address)
        except OSError as exc:
            last = exc
    raise last or OSError(f"{host}: could not connect")


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _connect


class _HTTPSConnection(http.client.HTTPSConnection):  # TLS still checks the URL's host name
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _connect


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPSConnection, req, context=self._context)  # type: ignore[attr-defined]


def opener(public_only: bool) -> urllib.request.OpenerDirector:
    """An opener for http(s) downloads; with `public_only`, every connection (redirects included) is
    checked, and there is no proxy, ftp or file handler to go around the check."""
    if not public_only:
        return urllib.request.build_opener()
    director = urllib.request.OpenerDirector()
    for handler in (
        _HTTPHandler(),
        _HTTPSHandler(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPRedirectHandler(),
        urllib.request.HTTPErrorProcessor(),
        urllib.request.UnknownHandler(),
    ):
        director.add_handler(handler)
    return director


def pinned_git(url: str) -> tuple[str, list[str]]:
    """For a git URL fetched for the API: the URL to clone and the `-c` settings that hold git to the
    checked address. Raises PrivateAddress or OSError as `admitted` does."""
    parts = urllib.parse.urlsplit(url)
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    default = {"http": 80, "https": 443, "git": 9418}.get(scheme)
    if default is None or not host:
        return url, []
    port = parts.port or default
    ip = admitted(host, port)[0]
    shown = f"[{ip}]" if ip.version == 6 else str(ip)
    if scheme == "git":  # git's own protocol has no resolve option: name the address instead
        netloc = shown + (f":{parts.port}" if parts.port else "")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), []
    return url, ["http.followRedirects=false", f"http.curloptResolve={host}:{port}:{shown}"]
