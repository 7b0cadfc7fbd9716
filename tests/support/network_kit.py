"""Shared pieces of the network tests: a web server on loopback, a script that asks for a host, a package
index with a git repository."""

from __future__ import annotations

import http.server
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest
from netns import Upstream


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        body = b"hello from the host\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def web() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def fetch_script(port: int) -> list[dict[str, Any]]:
    fetch = f"curl -sS --noproxy '' -x \"$http_proxy\" http://127.0.0.1:{port}/"
    ask = {"host": "127.0.0.1", "port": port, "reason": "to fetch the greeting"}
    return [
        {"tool_calls": [{"name": "terminal", "arguments": {"command": fetch}}]},
        {"tool_calls": [{"name": "network_request", "arguments": ask}]},
        {"tool_calls": [{"name": "terminal", "arguments": {"command": fetch}}]},
        {"text": "fetched"},
    ]


def publish_index(server: Upstream) -> None:
    """A package index with one wheel (PEP 503) and a git repository (dumb HTTP) on the upstream."""
    www = server.root / "www"
    if (www / "simple").exists():
        return
    wheel = www / "packages" / "hm14demo-1.0-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("hm14demo/__init__.py", "VALUE = 14\n")
        archive.writestr(
            "hm14demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: hm14demo\nVersion: 1.0\n"
        )
        archive.writestr(
            "hm14demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr("hm14demo-1.0.dist-info/RECORD", "")
    index = www / "simple" / "hm14demo"
    index.mkdir(parents=True)
    (index / "index.html").write_text(f'<a href="/packages/{wheel.name}">{wheel.name}</a>\n')
    work = server.root / "repo"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(work)]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "README").write_text("cloned through the egress proxy\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(www / "repo.git")], check=True)
    subprocess.run(["git", "-C", str(www / "repo.git"), "update-server-info"], check=True)
