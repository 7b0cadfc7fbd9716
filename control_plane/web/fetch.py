"""Fetching a page from the control plane under the profile's egress policy: the same engine as the
sandboxes' proxy (backends/network/policy.py: the allowlist on the name, refused ranges on the resolved
addresses, the proxy's resolver), the connection pinned to the admitted address, every redirect checked
again, every decision written to an audit log."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from backends import SandboxSpec
from backends.network.policy import Denial, IPAddress, Policy, Target, advice, normalise_host
from backends.network.proxy import egress_proxy

from ..tls import client_tls

MAX_REDIRECTS = 5


class FetchRefused(Exception):
    """The egress policy refused the URL; the message says how an operator allows it."""


class FetchFailed(Exception):
    """The URL could not be fetched (no such name, unreachable, an error status)."""


@dataclass(frozen=True)
class Page:
    url: str
    """Where it came from, after redirects."""
    content_type: str
    body: bytes
    total: int | None
    """The size the server announced (Content-Length), when it did."""
    cut: bool
    """The body was cut at the byte cap."""


class Fetcher:
    """One session's fetches for `tool`: `spec` is its sandbox settings (network, allow), `audit` the
    log file."""

    def __init__(
        self, spec: SandboxSpec, audit: Path, timeout: float, max_bytes: int, session: str, tool: str
    ) -> None:
        if spec.network == "none":
            raise FetchRefused(
                f"{tool} is refused: this profile's sandboxes have `network: none`, and {tool} fetches "
                "under the same egress policy. To allow it, set `sandbox.network: allowlist` and list the "
                "hosts in `sandbox.allow` (config.yaml), or `network: full`"
            )
        self._policy = Policy(spec.allow if spec.network == "allowlist" else [])
        self._any_name = spec.network == "full"  # full: any public host; refused ranges still apply
        self._audit = audit
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._session = session

    def get(self, url: str, verify: ssl.SSLContext | None = None) -> Page:
        """GET `url`, following redirects (`verify`: a TLS context other than the usual one); raises
        FetchRefused or FetchFailed."""
        tls = verify or client_tls()
        with httpx.Client(timeout=self._timeout, verify=tls, trust_env=False) as client:
            for _ in range(MAX_REDIRECTS + 1):
                page_or_next = self._one(client, url)
                if isinstance(page_or_next, Page):
                    return page_or_next
                url = page_or_next
        raise FetchFailed(f"{url}: more than {MAX_REDIRECTS} redirects")

    def _one(self, client: httpx.Client, url: str) -> Page | str:
        """One request: the page, or where it redirects to."""
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise FetchFailed(f"{url!r} is not a URL: {exc}") from exc
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise FetchFailed(f"{url!r}: only http:// and https:// URLs can be fetched")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        entry: dict[str, Any] = {"time": round(time.time(), 3), "session": self._session, "url": url}
        entry.update(host=parsed.host, port=port, method="GET")
        started = time.monotonic()
        try:
            address = self._admit(parsed.host, port)
            entry["address"] = address
            pinned = parsed.copy_with(host=address)
            headers = {
                "Host": parsed.netloc.decode("ascii"),
                "Accept": "text/html,text/plain;q=0.9,*/*;q=0.5",
            }
            extensions = {"sni_hostname": parsed.host} if parsed.scheme == "https" else {}
            with client.stream("GET", pinned, headers=headers, extensions=extensions) as response:
                entry["status"] = response.status_code
                if response.is_redirect and "location" in response.headers:
                    entry.update(allowed=True, redirect=response.headers["location"])
                    return str(parsed.join(response.headers["location"]))
                if response.status_code >= 400:
                    raise FetchFailed(f"{url}: the server answered HTTP {response.status_code}")
                page = self._read(url, response)
                entry.update(allowed=True, bytes_down=len(page.body), cut=page.cut)
                return page
        except FetchRefused as exc:
            entry.update(allowed=False, denied="policy", reason=str(exc))
            raise
        except FetchFailed as exc:
            entry.setdefault("allowed", "address" in entry)
            entry.update(denied="unreachable", reason=str(exc))
            raise
        except httpx.HTTPError as exc:
            entry.update(allowed=False, denied="protocol", reason=f"{type(exc).__name__}: {exc}")
            raise FetchFailed(f"{url}: {_reason(exc)}") from exc
        finally:
            entry["duration"] = round(time.monotonic() - started, 4)
            self._record(entry)

    def _admit(self, host: str, port: int) -> str:
        """The address to connect to, as the policy decides it (name, then resolved addresses)."""
        if self._any_name:
            name = normalise_host(host)
            literal = _literal(name)
            decision: Target | Denial = Target(name, port, literal)
        else:
            decision = self._policy.check(host, port)
        if isinstance(decision, Denial):
            raise FetchRefused(advice(host, port, decision))
        if decision.literal is not None:
            addresses = [decision.literal]
        else:
            try:
                addresses = asyncio.run(_resolve(decision.host, port))
            except OSError as exc:
                raise FetchFailed(f"{host} does not resolve ({exc})") from exc
        admitted = self._policy.admit(decision, addresses)
        if isinstance(admitted, Denial):
            raise FetchRefused(advice(host, port, admitted))
        return str(admitted[0])

    def _read(self, url: str, response: httpx.Response) -> Page:
        announced = response.headers.get("content-length")
        body = bytearray()
        cut = False
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) >= self._max_bytes:
                del body[self._max_bytes :]
                cut = True
                break
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        total = int(announced) if announced and announced.isdigit() else None
        return Page(url, kind, bytes(body), total, cut)

    def _record(self, entry: dict[str, Any]) -> None:
        self._audit.parent.mkdir(parents=True, exist_ok=True)
        with self._audit.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, separators=(",", ":")) + "\n")


async def _resolve(host: str, port: int) -> list[IPAddress]:
    """The egress proxy's resolver (tests point it at their own names)."""
    return await egress_proxy().resolver(host, port)


def _literal(name: str) -> Any:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _reason(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectTimeout):
        return "unreachable (no answer to the connection in time)"
    if isinstance(exc, httpx.ConnectError):
        return f"unreachable ({exc})"
    if isinstance(exc, httpx.TimeoutException):
        return "the server stopped answering (timed out)"
    return f"{type(exc).__name__}: {exc}"
