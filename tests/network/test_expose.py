"""Ports exposed on request, on local and Docker: the sandbox's network stays none, HTTP and WebSocket
reach a program inside from 127.0.0.1 on the host, exposures are listed and closed and end with the
sandbox, and a symlink planted in the ingress directory never leads the host anywhere else."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend
from websockets.sync.client import connect

from backends import Sandbox, SandboxSpec
from backends.network import exposures, net_dir
from control_plane.config.settings import Limits, Settings
from control_plane.tools import TOOLS, ToolContext, invoke

SUPPORT = Path(__file__).resolve().parents[1] / "support"


SKIPS = {
    "ssh": "ssh: a remote host's ports are the remote user's to forward (ssh -L); it has no ingress socket",
    "modal-standin": "Modal exposes ports through its own tunnels (modal.forward), not an ingress socket",
}


def _wait_listening(sb: Sandbox, *ports: int) -> None:
    """Until the servers inside listen (the kernel's socket table, read in the sandbox's shell)."""
    checks = " && ".join(f"grep -qi ':{port:04X} .* 0A' /proc/net/tcp" for port in ports)
    sb.run(f"for i in $(seq 200); do {checks} && break; sleep 0.05; done")


@pytest.fixture(params=["local", "docker", "ssh", "modal-standin"], scope="module")
def served(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox on network none with an HTTP server on 8000 and a WebSocket echo on 8001 inside."""
    backend = get_backend(request.param)
    if request.param in SKIPS:
        pytest.skip(SKIPS[request.param])
    with backend.create(SandboxSpec(memory="512m", pids=256)) as sb:
        sb.upload(SUPPORT / "ws_echo.py", "/tmp")
        web = (
            "cd /tmp && echo served-inside > index.html && exec python3 -m http.server 8000 --bind 127.0.0.1"
        )
        sb.call("proc.spawn", {"command": web})
        sb.call("proc.spawn", {"command": "exec python3 /tmp/ws_echo.py 8001"})
        _wait_listening(sb, 8000, 8001)
        yield sb


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


def test_http_and_websocket_reach_a_port_inside_with_the_network_still_none(served: Sandbox) -> None:
    assert served.ingress is not None
    web = served.ingress.expose(8000)
    assert web.host == "127.0.0.1" and web.url == f"http://127.0.0.1:{web.host_port}/"
    assert _get(web.url) == b"served-inside\n"
    ws = served.ingress.expose(8001)
    with connect(f"ws://127.0.0.1:{ws.host_port}/") as client:
        client.send("hello")
        assert client.recv(timeout=10) == "echo: hello"
    links = served.run("tail -n +2 /proc/net/route; awk 'NR > 2 {print $1}' /proc/net/dev")["output"]
    assert links.split() == ["lo:"], links  # no route, no interface but loopback
    listed = {e.port: e.host_port for e in exposures(net_dir(served.id))}
    assert listed == {8000: web.host_port, 8001: ws.host_port}
    assert served.ingress.unexpose(8000) and not served.ingress.unexpose(8000)
    with pytest.raises(OSError):
        _get(web.url)
    assert [e.port for e in exposures(net_dir(served.id))] == [8001]
    served.ingress.unexpose(8001)


def test_a_symlink_planted_in_the_ingress_directory_leads_nowhere(served: Sandbox, tmp_path: Path) -> None:
    assert served.ingress is not None
    exposure = served.ingress.expose(8000)
    host_socket = tmp_path / "host.sock"
    bait = socket.socket(socket.AF_UNIX)
    bait.bind(str(host_socket))
    bait.listen(1)
    bait.settimeout(0.5)
    real = served.ingress.dir / "ingress.sock"
    os.link(real, served.ingress.dir / "saved.sock")  # to put the runtime's socket back afterwards
    planted = served.run(  # what any program inside can do: the directory is the sandbox's
        f"ln -s {host_socket} /run/hermetic-ingress/x && mv -f /run/hermetic-ingress/x "
        "/run/hermetic-ingress/ingress.sock && readlink /run/hermetic-ingress/ingress.sock"
    )
    assert planted["output"].strip() == str(host_socket)
    try:
        with pytest.raises(OSError):
            _get(exposure.url)
        with pytest.raises(TimeoutError):
            bait.accept()
    finally:
        os.rename(served.ingress.dir / "saved.sock", real)
        bait.close()
    assert _get(exposure.url) == b"served-inside\n"
    served.ingress.unexpose(8000)


def test_the_agent_tool_asks_then_returns_the_url(served: Sandbox) -> None:
    asked: list[dict[str, Any]] = []

    def ask(**question: Any) -> str:
        asked.append(question)
        return "yes"

    ctx = ToolContext("s-1", "c-1", Limits(), lambda: served, ask=ask, settings=Settings())
    result = invoke(
        TOOLS.get("expose_port"), "expose_port", json.dumps({"port": 8000, "reason": "the site"}), ctx
    )
    assert result.ok, result.content
    assert asked[0]["kind"] == "approval" and asked[0]["choices"] == ["yes", "no"]
    url = result.content.split("reachable at ")[1].split()[0]
    assert _get(url) == b"served-inside\n"
    closed = invoke(TOOLS.get("expose_port"), "expose_port", json.dumps({"port": 8000, "close": True}), ctx)
    assert closed.content == "port 8000 is no longer exposed"
    ctx.ask = lambda **question: None  # no answer in time
    refused = invoke(TOOLS.get("expose_port"), "expose_port", json.dumps({"port": 8000}), ctx)
    assert not refused.ok and "did not want" in refused.content
    assert exposures(net_dir(served.id)) == []


def test_the_cli_exposes_until_interrupted(served: Sandbox) -> None:
    cli = subprocess.Popen(
        [sys.executable, "-m", "control_plane", "sandbox", "expose", served.id, "8000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert cli.stdout is not None
        url = cli.stdout.readline().strip()
        assert _get(url) == b"served-inside\n"
        listed = subprocess.run(
            [sys.executable, "-m", "control_plane", "sandbox", "exposed", served.id],
            capture_output=True,
            text=True,
        )
        assert listed.stdout.startswith(f"8000\t{url}\tpid {cli.pid}")
    finally:
        cli.send_signal(signal.SIGINT)
        cli.wait(30)
    with pytest.raises(OSError):
        _get(url)


def test_exposures_end_with_the_sandbox() -> None:
    backend = get_backend("local")
    sb = backend.create(SandboxSpec())
    sb.call("proc.spawn", {"command": "exec python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp"})
    _wait_listening(sb, 8000)
    assert sb.ingress is not None
    exposure = sb.ingress.expose(8000)
    assert _get(exposure.url)
    sb.close()
    with pytest.raises(OSError):
        _get(exposure.url)
    assert exposures(net_dir(sb.id)) == [] and not net_dir(sb.id).exists(), "nothing is left behind"
