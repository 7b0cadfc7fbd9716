"""`hermetic mcp add NAME --npm PACKAGE`: a real MCP reference server from npm, installed on the host into
the profile and run sealed with Node in a sandbox (docker: the hermetic-sandbox:node image variant)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import get_backend
from mcp_calls import call
from typer.testing import CliRunner

from control_plane.agent.agent import Agent
from control_plane.cli.main import app
from control_plane.config.settings import load_settings

PACKAGE = "@modelcontextprotocol/server-memory"


@pytest.fixture(params=["local", "docker"])
def profile(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: a server cannot be installed from npm")
    backend = get_backend(request.param)
    if request.param == "docker":
        backend.ensure_image("hermetic-sandbox:node")  # type: ignore[attr-defined]
    monkeypatch.setenv("HERMETIC_ROOT", str(tmp_path))
    monkeypatch.setenv("HERMETIC_BACKEND", request.param)
    yield request.param


def test_an_npm_server_is_installed_into_the_profile_and_runs_sealed(profile: str, tmp_path: Path) -> None:
    runner = CliRunner()
    added = runner.invoke(
        app, ["mcp", "add", "mem", "--npm", PACKAGE, "--env", "MEMORY_FILE_PATH=/workspace/graph.jsonl"]
    )
    assert added.exit_code == 0, added.output
    settings = load_settings(root=tmp_path)
    config = settings.mcp_servers["mem"]
    assert config.image == "hermetic-sandbox:node" and not config.host and config.command == "node"
    assert config.args == ["/opt/mcp/mem/node_modules/@modelcontextprotocol/server-memory/dist/index.js"]
    assert (settings.home / "mcp" / "mem" / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir()
    tested = runner.invoke(app, ["mcp", "test", "mem"])
    assert tested.exit_code == 0 and "mcp_mem_create_entities" in tested.output, tested.output
    agent = Agent(load_settings(root=tmp_path, learning={"enabled": False}))
    try:
        made = call(
            agent,
            "mcp_mem_create_entities",
            entities=[{"name": "npm", "entityType": "x", "observations": ["sealed"]}],
        )
        assert made.ok, made.content
        graph = call(agent, "mcp_mem_read_graph")
        assert graph.ok and "sealed" in graph.content
        assert agent.mcp is not None
        sandbox = agent.mcp.servers["mem"].sandbox
        assert sandbox is not None and sandbox.backend == profile
        if profile == "docker":  # Node comes from the image variant, not from the host
            assert sandbox.run("node --version")["output"].startswith("v18.")
    finally:
        agent.close()


def test_a_package_that_does_not_install_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMETIC_ROOT", str(tmp_path))  # refused on the host, before any backend
    failed = CliRunner().invoke(app, ["mcp", "add", "nope", "--npm", "/nonexistent/hm-no-such-package"])
    assert failed.exit_code == 1 and "npm could not install" in failed.output
    both = CliRunner().invoke(app, ["mcp", "add", "x", "--npm", PACKAGE, "--pip", "y"])
    assert both.exit_code == 2 and "--pip or --npm, not both" in both.output
