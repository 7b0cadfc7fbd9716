"""Debian's HAProxy on a loopback port in front of HTTP servers on loopback: random routing, health checks
every 500 ms, and a request whose connection is refused sent to another server (never a request that
reached one: a POST is not retried)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

CONFIG = """\
global
    maxconn 2048

defaults
    mode http
    timeout connect 2s
    timeout client 300s
    timeout server 300s
    timeout http-request 30s
    retries 3
    option redispatch
    retry-on conn-failure

frontend api
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance random
    option httpchk GET /health
    default-server inter 500ms fall 2 rise 1
{servers}
"""


@dataclass
class LocalHAProxy:
    port: int
    proc: subprocess.Popen[str]
    dir: Path
    said: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_serving(self, timeout: float = 60) -> None:
        """Until HAProxy answers /health from one of its servers (bounded, polled: another process)."""
        deadline = time.monotonic() + timeout
        while not self._answers():
            assert self.proc.poll() is None, f"haproxy exited: {''.join(self.said)}"
            assert time.monotonic() < deadline, "HAProxy did not serve in time"
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def haproxy_binary() -> str:
    """Debian's haproxy (setup.sh installs it); the test is skipped, saying so, where it is missing."""
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if found is None:
        pytest.skip("haproxy is missing: apt-get install haproxy")
    return found


def start_haproxy(port: int, backends: list[int]) -> LocalHAProxy:
    """HAProxy on 127.0.0.1:`port` balancing over 127.0.0.1:each of `backends`."""
    root = Path(tempfile.mkdtemp(prefix="hermetic-haproxy-"))
    servers = "\n".join(f"    server r{i} 127.0.0.1:{p} check" for i, p in enumerate(backends))
    config = root / "haproxy.cfg"
    config.write_text(CONFIG.format(port=port, servers=servers))
    check = subprocess.run([haproxy_binary(), "-c", "-f", str(config)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen(
        [haproxy_binary(), "-db", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    proxy = LocalHAProxy(port, proc, root)
    threading.Thread(target=lambda: proxy.said.extend(proc.stderr or ()), daemon=True).start()
    return proxy
