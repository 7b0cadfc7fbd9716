"""The sandbox's doors, both Unix sockets in directories the control plane mounts; the network stays none.

Egress (`network: allowlist`): HERMETIC_EGRESS_SOCKET names the egress proxy's socket; a bridge listens
on 127.0.0.1 and hands each accepted connection to the proxy over it (SCM_RIGHTS), so the proxy reads
and writes the client's own socket and the bridge is off the data path; the proxy variables point every
common tool at it. When the proxy is down the socket refuses and the bridge closes the connection: no
network, never an open one.

Ingress (exposed ports): HERMETIC_INGRESS_SOCKET is where this runtime listens; the control plane
connects, names a port on a first line ("8000\n"), and the bytes are carried to 127.0.0.1:8000 here.
Any other first line ("watch PATH", "stats") is a command from the host for the runtime itself
(`hermetic sandbox watch`, `hermetic sandbox stats` from any process on the host): see server.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import tempfile
import threading
from typing import Callable

log = logging.getLogger("hermetic.runtime.netbridge")

CHUNK = 1 << 20
MAX_LINE = 4096 + 7  # "watch ", a path, "\n"
HANDOVER_TIMEOUT = 10.0
CommandFn = Callable[[str, socket.socket], None]
"""Serves a host's command (its first line, not a port) on its connection."""
NO_PROXY = "localhost,127.0.0.1,::1"


def proxy_environment(url: str) -> dict[str, str]:
    """The variables that point curl, pip, npm, git, Python, Node and friends at the proxy."""
    env = {}
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        env[name] = env[name.upper()] = url
    env["no_proxy"] = env["NO_PROXY"] = NO_PROXY
    env["PIP_PROXY"] = url
    env["npm_config_proxy"] = env["npm_config_https_proxy"] = url
    env["GIT_CONFIG_COUNT"] = "1"  # git reads http_proxy too; this also covers a user's gitconfig
    env["GIT_CONFIG_KEY_0"] = "http.proxy"
    env["GIT_CONFIG_VALUE_0"] = url
    return env


class Bridge:
    """Listens on 127.0.0.1 (an ephemeral port) and hands each connection to the proxy's Unix socket."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, name="netbridge", daemon=True).start()

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    def _accept(self) -> None:
        while True:
            client, _ = self._listener.accept()
            with client:
                self._hand_over(client)

    def _hand_over(self, client: socket.socket) -> None:
        """Give the proxy this connection's socket (one byte carrying its descriptor); ours is closed
        after. A proxy that does not take it within HANDOVER_TIMEOUT leaves the client with nothing."""
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as proxy:
            proxy.settimeout(HANDOVER_TIMEOUT)
            try:
                proxy.connect(self.socket_path)
                socket.send_fds(proxy, [b"\0"], [client.fileno()])
            except OSError as exc:  # the proxy is down: this connection gets nothing
                log.warning("egress proxy unreachable: %s", exc)


class Ingress:
    """Listens on a Unix socket; each connection names a loopback port and is carried to it."""

    def __init__(self, socket_path: str, on_command: CommandFn | None = None) -> None:
        self._on_command = on_command
        if os.path.lexists(socket_path):
            os.unlink(socket_path)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(socket_path)
        os.chmod(socket_path, 0o666)  # the host side may be another uid (docker)
        self._listener.listen(128)
        threading.Thread(target=self._accept, name="ingress", daemon=True).start()

    def _accept(self) -> None:
        while True:
            client, _ = self._listener.accept()
            try:
                threading.Thread(target=self._carry, args=(client,), daemon=True).start()
            except RuntimeError:
                client.close()

    def _carry(self, client: socket.socket) -> None:
        line = b""
        while not line.endswith(b"\n") and len(line) < (8 if line[:1].isdigit() else MAX_LINE):
            byte = client.recv(1)
            if not byte:
                break
            line += byte
        if line[:1].isalpha() and line.endswith(b"\n") and self._on_command is not None:
            self._on_command(line[:-1].decode("utf-8", "surrogateescape"), client)
            client.close()
            return
        port = line.strip()
        if not port.isdigit() or not 0 < int(port) < 65536:
            client.close()
            return
        try:
            inner = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
        except OSError:  # nothing listens there: the host side sees the connection close
            client.close()
            return
        inner.settimeout(None)
        inner.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=_copy, args=(inner, client), daemon=True)
        back.start()
        _copy(client, inner)
        back.join()
        client.close()
        inner.close()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    """Copy until EOF: by splice(2) through a pipe where Python has it (3.10+), else recv/sendall."""
    try:
        if hasattr(os, "splice"):
            _splice(source, sink)
        else:
            buffer = bytearray(CHUNK)
            while True:
                got = source.recv_into(buffer)
                if not got:
                    break
                sink.sendall(memoryview(buffer)[:got])
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _splice(source: socket.socket, sink: socket.socket) -> None:
    read_end, write_end = os.pipe()
    try:
        with contextlib.suppress(OSError):
            fcntl.fcntl(write_end, 1031, CHUNK)  # F_SETPIPE_SZ: fewer, larger moves
        while True:
            moved = os.splice(source.fileno(), write_end, CHUNK)
            if not moved:
                return
            while moved:
                moved -= os.splice(read_end, sink.fileno(), moved)
    finally:
        os.close(read_end)
        os.close(write_end)


SYSTEM_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")


def trust_environment(ca_path: str) -> dict[str, str]:
    """Trust the egress proxy's CA for the hosts it adds credentials to: a bundle of the system's roots
    and that CA, named in the variables OpenSSL, curl, Python, pip, git and Node read."""
    with open(ca_path, "rb") as fh:
        ca = fh.read()
    system = next((path for path in SYSTEM_BUNDLES if os.path.exists(path)), None)
    roots = b""
    if system is not None:
        with open(system, "rb") as fh:
            roots = fh.read()
    fd, bundle = tempfile.mkstemp(prefix="hermetic-ca-", suffix=".pem")
    with os.fdopen(fd, "wb") as fh:
        fh.write(roots.rstrip(b"\n") + b"\n" + ca)
    os.chmod(bundle, 0o644)
    names = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO")
    return {**dict.fromkeys(names, bundle), "NODE_EXTRA_CA_CERTS": ca_path}


def start_from_environment(on_command: CommandFn | None = None) -> dict[str, str]:
    """Open the doors the control plane mounted; the proxy variables to set (none without egress)."""
    ingress = os.environ.get("HERMETIC_INGRESS_SOCKET")
    if ingress and os.path.isdir(os.path.dirname(ingress)):
        try:
            Ingress(ingress, on_command)
        except OSError as exc:  # a read-only or missing mount: no exposed ports, the rest works
            log.warning("no ingress socket at %s: %s", ingress, exc)
    path = os.environ.get("HERMETIC_EGRESS_SOCKET")
    if not path:
        return {}
    env = proxy_environment(Bridge(path).url)
    ca = os.environ.get("HERMETIC_EGRESS_CA")
    if ca:
        try:
            env.update(trust_environment(ca))
        except OSError as exc:  # the credentials' hosts then fail TLS, saying why; the rest works
            log.warning("cannot trust the egress CA %s: %s", ca, exc)
    return env
