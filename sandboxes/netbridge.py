"""The sandbox's one way out on `network: allowlist`: 127.0.0.1:PORT bridged to the egress socket.

The sandbox has loopback only. The control plane mounts a directory holding `egress.sock` (its egress
proxy) and names it in HERMETIC_EGRESS_SOCKET; this bridge listens on loopback and carries each
connection to that socket byte for byte, and the proxy variables point every common tool at it. When
the proxy is down the socket refuses and the bridge closes the connection: no network, never an open one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading

log = logging.getLogger("hermetic.runtime.netbridge")

CHUNK = 256 * 1024
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
    """Listens on 127.0.0.1 (an ephemeral port) and forwards each connection to a Unix socket."""

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
            try:
                threading.Thread(target=self._carry, args=(client,), daemon=True).start()
            except RuntimeError:  # out of threads (pids limit): refuse this one, keep serving
                client.close()

    def _carry(self, client: socket.socket) -> None:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(self.socket_path)
        except OSError as exc:  # the proxy is down: this connection gets nothing
            log.warning("egress proxy unreachable: %s", exc)
            upstream.close()
            client.close()
            return
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=_copy, args=(upstream, client), daemon=True)
        back.start()
        _copy(client, upstream)
        back.join()
        client.close()
        upstream.close()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def start_from_environment() -> dict[str, str]:
    """Start the bridge if the sandbox has an egress socket; the proxy variables to set (or none)."""
    path = os.environ.get("HERMETIC_EGRESS_SOCKET")
    if not path:
        return {}
    return proxy_environment(Bridge(path).url)
