"""The egress proxy: one asyncio loop per control-plane process, one Unix socket per sandbox.

A sandbox on `network: allowlist` has no network of its own; its runtime listens on 127.0.0.1:PORT and
hands each connection's socket to `<socket dir>/egress.sock`, which this proxy listens on (pump.py).
It serves CONNECT and absolute-form HTTP requests, decides by the sandbox's Policy, resolves names
itself, connects to the address the policy admitted (no second lookup), checks the TLS server name of
every tunnel whose client speaks TLS first (on any port: a CONNECT to an allowed `host:8443` cannot
front another name) and the Host header of plain HTTP, and appends every decision to the sandbox's
audit log (JSON lines). It carries TCP only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .credentials import Credential, SandboxCA
from .intercept import InterceptError, carry
from .loop import on_loop
from .policy import Denial, IPAddress, Policy, PolicyError, Target, advice, normalise_host, split_authority
from .pump import SocketReader, take_over, tunnel
from .tls import HANDSHAKE, NotClientHello, read_client_hello

log = logging.getLogger("hermetic.network.proxy")

SOCKET_NAME = "egress.sock"
CA_NAME = "ca.pem"
HEAD_LIMIT = 64 * 1024
MAX_DENIALS = 50  # refusals kept for the next tool result; the audit log has them all
# Hop-by-hop headers of the client's request, and the proxy's own: never forwarded upstream.
_DROP = {"proxy-connection", "proxy-authorization", "connection", "keep-alive", "te", "upgrade"}

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


async def host_resolver(host: str, port: int) -> list[IPAddress]:
    """The host's own resolver (getaddrinfo: /etc/hosts, then DNS), addresses in its order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])  # fe80::1%eth0: the scope goes
        if address not in seen:
            seen.append(address)
    return seen


class Refused(Exception):
    """A request the proxy will not carry; `status` is the HTTP answer, `denial` why."""

    def __init__(self, status: int, denial: Denial) -> None:
        super().__init__(denial.reason)
        self.status = status
        self.denial = denial


@dataclass
class Attachment:
    """One sandbox as the proxy knows it."""

    sandbox_id: str
    socket_dir: Path
    policy: Policy
    audit: Path
    server: asyncio.Task[None] | None = None
    """The accept loop while the proxy listens for this sandbox."""
    credentials: dict[str, Credential] = field(default_factory=dict)
    """By host: the CONNECTs to 443 whose TLS the proxy terminates to add a header."""
    ca: SandboxCA | None = None
    denied: list[str] = field(default_factory=list)
    open: set[socket.socket] = field(default_factory=set)
    """The sockets of its connections in flight, shut down when the proxy stops serving it."""

    def record(self, entry: dict[str, Any]) -> None:
        with self.audit.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, separators=(",", ":")) + "\n")


class EgressProxy:
    """The process's egress proxy: a thread-safe facade over the network loop (loop.py)."""

    def __init__(
        self, resolver: Resolver | None = None, connect_timeout: float = 10.0, idle_timeout: float = 300.0
    ) -> None:
        self.resolver: Resolver = resolver or host_resolver
        """Replaceable (tests map their own names to addresses in their own namespaces)."""
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.head_timeout = 30.0
        self.upstream_context = ssl.create_default_context()
        """Checks an intercepted host's real certificate (the host's trust store; tests load their CA)."""
        self._attached: dict[str, Attachment] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- what backends call ----------------------------------------------------------------

    def attach(
        self,
        sandbox_id: str,
        socket_dir: Path,
        policy: Policy,
        audit: Path,
        credentials: Sequence[Credential] = (),
    ) -> None:
        """Listen for the sandbox on `socket_dir/egress.sock`; decisions go to `audit`. With credentials,
        a CA of its own signs their hosts' certificates; its certificate is `socket_dir/ca.pem`."""
        socket_dir.mkdir(parents=True, exist_ok=True)
        socket_dir.chmod(0o755)
        audit.parent.mkdir(parents=True, exist_ok=True)
        attachment = Attachment(
            sandbox_id, socket_dir, policy, audit, credentials={c.host: c for c in credentials}
        )
        if credentials:
            attachment.ca = SandboxCA(sorted(attachment.credentials))
            (socket_dir / CA_NAME).write_bytes(attachment.ca.pem)
            (socket_dir / CA_NAME).chmod(0o644)
        self._attached[sandbox_id] = attachment
        on_loop(self._listen(attachment))

    def detach(self, sandbox_id: str) -> None:
        """Stop serving the sandbox and remove its socket; the audit log stays."""
        attachment = self._attached.pop(sandbox_id, None)
        if attachment is not None:
            on_loop(self._close(attachment))
            (attachment.socket_dir / SOCKET_NAME).unlink(missing_ok=True)

    def stop(self) -> None:
        """Close every listener (the sockets stay, refusing connections): the sandboxes lose the network."""
        for attachment in list(self._attached.values()):
            on_loop(self._close(attachment))

    def start(self) -> None:
        """Listen again for every attached sandbox, on the same paths inside their mounted directories."""
        for attachment in list(self._attached.values()):
            if attachment.server is None:
                on_loop(self._listen(attachment))

    def allow(self, sandbox_id: str, rules: list[str]) -> None:
        """Add rules to an attached sandbox's policy from now on (an approved request). Raises PolicyError."""
        attachment = self._attached[sandbox_id]
        attachment.policy = Policy([*attachment.policy.rules, *rules])

    def take_denials(self, sandbox_id: str) -> list[str]:
        """The refusals since the last call, as sentences for the agent (host, reason, the fix)."""
        attachment = self._attached.get(sandbox_id)
        if attachment is None:
            return []
        taken, attachment.denied = attachment.denied, []
        return taken

    # -- the loop's side -------------------------------------------------------------------

    async def _listen(self, attachment: Attachment) -> None:
        path = attachment.socket_dir / SOCKET_NAME
        path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        path.chmod(0o666)  # the sandbox's user (uid 1000) must be able to connect
        listener.listen(256)
        listener.setblocking(False)
        attachment.server = asyncio.create_task(self._accept(attachment, listener))

    async def _accept(self, attachment: Attachment, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    client, _ = await loop.sock_accept(listener)
                except OSError as exc:  # out of file descriptors: refuse for a moment, keep listening
                    log.warning("egress proxy for %s: accept failed: %s", attachment.sandbox_id, exc)
                    await asyncio.sleep(0.1)
                    continue
                client.setblocking(False)
                task = loop.create_task(self._serve(attachment, client))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        finally:
            listener.close()

    async def _close(self, attachment: Attachment) -> None:
        if attachment.server is not None:
            attachment.server.cancel()
            await asyncio.gather(attachment.server, return_exceptions=True)
            attachment.server = None
        for sock in list(attachment.open):  # a stopped proxy carries nothing, not even open tunnels
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    async def _serve(self, attachment: Attachment, conn: socket.socket) -> None:
        started = time.monotonic()
        entry: dict[str, Any] = {"time": round(time.time(), 3), "host": None, "port": None}
        upstream: socket.socket | None = None
        client = conn
        attachment.open.add(conn)
        try:
            client, first = await asyncio.wait_for(take_over(conn), self.head_timeout)
            attachment.open.add(client)
            reader = SocketReader(client, HEAD_LIMIT)
            reader.buffer += first
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.head_timeout)
            method, host, port, forward = _parse_head(head)
            entry.update(host=host, port=port, method=method)
            if method == "CONNECT" and port == 80:  # an opaque tunnel would hide the Host header
                raise Refused(
                    403,
                    Denial("connect-80", "CONNECT to port 80: send http:// URLs as plain proxy requests"),
                )
            target = _checked(attachment.policy.check(host, port))
            entry["host"] = target.host
            upstream, address = await self._connect(attachment.policy, target)
            attachment.open.add(upstream)
            entry["address"] = str(address)
            loop = asyncio.get_running_loop()
            if method == "CONNECT":
                await loop.sock_sendall(client, b"HTTP/1.1 200 Connection established\r\n\r\n")
                credential = attachment.credentials.get(target.host) if target.port == 443 else None
                if credential is not None:
                    entry["credential"] = credential.name
                    up, down = await self._intercept(attachment, credential, reader, client, upstream)
                    entry.update(allowed=True, tls="intercepted", bytes_up=up, bytes_down=down)
                    return
                if target.port == 443 or await self._client_speaks_tls(reader, upstream):
                    forward = await self._check_server_name(reader, target)
                    entry["tls"] = True
            forward += reader.leftover()
            await loop.sock_sendall(upstream, forward)
            up, down = await tunnel(client, upstream, self.idle_timeout)
            entry.update(allowed=True, bytes_up=len(forward) + up, bytes_down=down)
        except Refused as exc:
            entry.update(allowed=False, denied=exc.denial.rule, reason=exc.denial.reason)
            message = advice(str(entry["host"]), int(entry["port"] or 0), exc.denial)
            attachment.denied = [*attachment.denied[-(MAX_DENIALS - 1) :], message]
            await _answer(client, exc.status, exc.denial.rule, message)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError) as exc:
            entry.update(allowed=False, denied="protocol", reason=f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug: this connection ends, the proxy serves on
            log.exception("egress proxy: %s", entry)
            entry.update(allowed=False, denied="internal", reason=f"{type(exc).__name__}: {exc}")
        finally:
            entry["duration"] = round(time.monotonic() - started, 4)
            if entry["host"] is not None or entry.get("denied") != "protocol":
                attachment.record(entry)
            for sock in (conn, client, upstream):
                if sock is not None:
                    attachment.open.discard(sock)
                    sock.close()

    async def _connect(self, policy: Policy, target: Target) -> tuple[socket.socket, IPAddress]:
        """A connection to an address the policy admitted for `target`; the first that answers."""
        if target.literal is not None:
            addresses: list[IPAddress] = [target.literal]
        else:
            try:
                resolved = await asyncio.wait_for(
                    self.resolver(target.host, target.port), self.connect_timeout
                )
            except (OSError, TimeoutError) as exc:
                raise Refused(502, Denial("unresolved", f"{target.host} did not resolve ({exc})")) from None
            addresses = _checked(policy.admit(target, resolved))
        failures = []
        loop = asyncio.get_running_loop()
        for address in addresses:
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            upstream = socket.socket(family, socket.SOCK_STREAM)
            upstream.setblocking(False)
            upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                await asyncio.wait_for(
                    loop.sock_connect(upstream, (str(address), target.port)), self.connect_timeout
                )
                return upstream, address
            except (OSError, TimeoutError) as exc:
                upstream.close()
                failures.append(f"{address}: {exc or 'timed out'}")
        raise Refused(502, Denial("connect-failed", f"{target.host}:{target.port}: {'; '.join(failures)}"))

    async def _intercept(
        self,
        attachment: Attachment,
        credential: Credential,
        reader: SocketReader,
        client: socket.socket,
        upstream: socket.socket,
    ) -> tuple[int, int]:
        """Carry one request with the credential added (intercept.py), on a thread. Raises Refused."""
        assert attachment.ca is not None
        if reader.buffer:  # TLS before the 200 arrived: no client does that
            raise Refused(0, Denial("protocol", "bytes sent before the tunnel was established"))
        try:
            return await asyncio.to_thread(
                carry, client, upstream, credential, attachment.ca, self.upstream_context, self.idle_timeout
            )
        except (InterceptError, PolicyError) as exc:
            raise Refused(0, Denial(getattr(exc, "rule", "credential"), str(exc))) from None

    async def _client_speaks_tls(self, reader: SocketReader, upstream: socket.socket) -> bool:
        """Whether the client's first bytes start a TLS record; False when the upstream speaks first
        (SMTP, SSH banners: no TLS server does), so truly opaque protocols stay opaque tunnels."""
        if not reader.buffer:
            loop = asyncio.get_running_loop()
            first: asyncio.Future[bool] = loop.create_future()

            def ready(client_first: bool) -> None:
                if not first.done():
                    first.set_result(client_first)

            loop.add_reader(reader.sock.fileno(), ready, True)
            loop.add_reader(upstream.fileno(), ready, False)
            try:
                client_first = await asyncio.wait_for(first, self.idle_timeout)
            finally:
                loop.remove_reader(reader.sock.fileno())
                loop.remove_reader(upstream.fileno())
            if not client_first:
                return False
            await reader.fill()
        return reader.buffer[0] == HANDSHAKE

    async def _check_server_name(self, reader: SocketReader, target: Target) -> bytes:
        """The ClientHello to forward, once its server name is the CONNECT host (none for an IP)."""
        try:
            hello, name = await asyncio.wait_for(read_client_hello(reader), self.head_timeout)
        except NotClientHello as exc:
            raise Refused(
                0, Denial("not-tls", f"{target.host}:{target.port} did not start with TLS ({exc})")
            ) from None
        expected = None if target.literal is not None else target.host
        try:
            got = normalise_host(name) if name is not None else None
        except PolicyError:
            got = name
        if got != expected:
            raise Refused(
                0,
                Denial(
                    "sni-mismatch",
                    f"the TLS server name {name!r} is not the CONNECT host {target.host!r}",
                ),
            )
        return hello


def _checked(decision: Any) -> Any:
    if isinstance(decision, Denial):
        raise Refused(400 if decision.rule == "malformed" else 403, decision)
    return decision


def _parse_head(head: bytes) -> tuple[str, str, int, bytes]:
    """(method, host, port, bytes to send upstream) of a proxy request. Raises Refused."""
    try:
        text = head.decode("latin-1")
        request_line, *header_lines = text[:-4].split("\r\n")
        method, target, version = request_line.split(" ")
    except ValueError:
        raise Refused(400, Denial("malformed", "not an HTTP proxy request")) from None
    if not version.startswith("HTTP/1."):
        raise Refused(400, Denial("malformed", f"unsupported protocol {version!r}"))
    try:
        if method == "CONNECT":
            host, port = split_authority(target)
            if port is None:
                raise PolicyError(f"CONNECT needs host:port, not {target!r}")
            return method, host, port, b""
        if not target.lower().startswith("http://"):
            raise PolicyError(f"a proxy request needs an http:// URL, not {target!r}")
        rest = target[len("http://") :]
        authority, slash, path = rest.partition("/")
        authority, _, _ = authority.partition("?")
        if "@" in authority or "#" in authority:
            raise PolicyError(f"no user info or fragment in a proxy URL: {target!r}")
        host, port = split_authority(authority)
        port = port or 80
        headers = [line.split(":", 1) for line in header_lines]
        if any(len(h) != 2 for h in headers):
            raise PolicyError("a header line without a colon")
        host_headers = [value.strip() for name, value in headers if name.strip().lower() == "host"]
        if len(host_headers) != 1:
            raise Refused(400, Denial("host-mismatch", "a plain HTTP request needs exactly one Host header"))
        header_host, header_port = split_authority(host_headers[0])
        if normalise_host(header_host) != normalise_host(host) or (header_port or 80) != port:
            raise Refused(
                400,
                Denial(
                    "host-mismatch", f"the Host header {host_headers[0]!r} is not the URL's {authority!r}"
                ),
            )
    except PolicyError as exc:
        raise Refused(400, Denial("malformed", str(exc))) from None
    origin = "/" + path if slash else "/"
    kept = [f"{n}:{v}" for n, v in headers if n.strip().lower() not in _DROP]
    forward = "\r\n".join([f"{method} {origin} {version}", *kept, "Connection: close", "", ""])
    return method, host, port, forward.encode("latin-1")


async def _answer(client: socket.socket, status: int, rule: str, message: str) -> None:
    """Tell the client why (an HTTP answer), unless the tunnel is already open (status 0)."""
    if status == 0:
        return
    body = (message + "\n").encode()
    reasons = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}
    head = (
        f"HTTP/1.1 {status} {reasons[status]}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nX-Hermetic-Egress: denied; rule={rule}\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        await asyncio.get_running_loop().sock_sendall(client, head.encode() + body)


_PROXY: EgressProxy | None = None
_PROXY_LOCK = threading.Lock()


def configure_egress(connect_timeout: float, idle_timeout: float) -> None:
    """Set the process's proxy timeouts (the settings' network.*); applies to connections from now on."""
    proxy = egress_proxy()
    proxy.connect_timeout, proxy.idle_timeout = connect_timeout, idle_timeout


def egress_proxy() -> EgressProxy:
    """The process's one egress proxy, started on first use."""
    global _PROXY
    with _PROXY_LOCK:
        if _PROXY is None:
            _PROXY = EgressProxy()
        return _PROXY
