"""The MCP servers the agent uses: real third-party servers (PyPI's mcp-server-time and mcp-server-git,
npm's reference memory server) running sealed in a sandbox of each backend, their tools in the agent's
tool list, their errors, a hang, a kill mid-call, and what their environment holds."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend
from mcp_calls import call
from mcp_servers import server_config

from control_plane.agent.agent import Agent
from control_plane.config.settings import load_settings
from control_plane.tools import ToolResult

BACKENDS = ["local", "docker"]


def open_agent(tmp_path: Path, backend: str, servers: dict[str, Any], **settings: Any) -> Agent:
    get_backend(backend)
    return Agent(
        load_settings(
            root=tmp_path, backend=backend, mcp_servers=servers, learning={"enabled": False}, **settings
        )
    )


@pytest.fixture
def closing() -> Iterator[list[Agent]]:
    agents: list[Agent] = []
    yield agents
    for agent in agents:
        agent.close()


def signal_server(agent: Agent, server: str, module: str, sig: str) -> None:
    """Send `sig` to the server's process inside its sandbox."""
    assert agent.mcp is not None
    sandbox = agent.mcp.servers[server].sandbox
    assert sandbox is not None
    done = sandbox.run(
        f"for p in /proc/[0-9]*; do grep -qa {module} $p/cmdline 2>/dev/null && kill -{sig} ${{p#/proc/}};"
        " done; true",
        timeout=30,
    )
    assert done["exit_code"] == 0, done


@pytest.mark.parametrize("backend", BACKENDS)
def test_third_party_servers_tools_run_in_a_sandbox(
    tmp_path: Path, backend: str, closing: list[Agent]
) -> None:
    servers = {"time": server_config("time"), "git": server_config("git", include=["git_status", "git_log"])}
    agent = open_agent(tmp_path, backend, servers)
    closing.append(agent)
    assert agent.mcp is not None and agent.mcp.problems == []
    mine = sorted(name for name in agent.tools if name.startswith("mcp_"))
    assert mine == [
        "mcp_git_git_log",
        "mcp_git_git_status",
        "mcp_time_convert_time",
        "mcp_time_get_current_time",
    ]
    schema = agent.tools["mcp_time_get_current_time"].schema()["function"]
    assert schema["parameters"]["required"] == ["timezone"]  # the server's own schema
    assert "terminal" in agent.tools  # the built-in tools are all still there

    now = call(agent, "mcp_time_get_current_time", timezone="Asia/Tokyo")
    assert now.ok and '"timezone": "Asia/Tokyo"' in now.content and "+09:00" in now.content
    converted = call(
        agent, "mcp_time_convert_time", source_timezone="UTC", time="12:00", target_timezone="Asia/Kolkata"
    )
    assert converted.ok and "17:30" in converted.content
    bad = call(agent, "mcp_time_get_current_time", timezone="Mars/Olympus")
    assert not bad.ok and "Invalid timezone" in bad.content
    assert call(agent, "mcp_time_get_current_time", timezone="UTC").ok  # an error is not a crash

    # git runs inside the server's sandbox, on a repository made there
    sandbox = agent.mcp.servers["git"].sandbox
    assert sandbox is not None
    sandbox.run(
        "git init -q /workspace/r && cd /workspace/r && git -c user.name=t -c user.email=t@t commit -q "
        "--allow-empty -m 'sealed commit'",
        timeout=60,
    )
    logged = call(agent, "mcp_git_git_log", repo_path="/workspace/r")
    assert logged.ok and "sealed commit" in logged.content
    missing = call(agent, "mcp_git_git_status", repo_path="/nowhere")
    assert not missing.ok


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_servers_environment_holds_only_what_was_allowed(
    tmp_path: Path, backend: str, closing: list[Agent], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HM16_ALLOWED", "passed-by-name")
    monkeypatch.setenv("HM16_SECRET", "must-not-pass")
    servers = {
        "time": server_config(
            "time", env={"HM16_GIVEN": "by-value"}, env_allow=["HM16_ALLOWED", "HM16_UNSET"]
        )
    }
    agent = open_agent(tmp_path, backend, servers)
    closing.append(agent)
    assert call(agent, "mcp_time_get_current_time", timezone="UTC").ok
    assert agent.mcp is not None
    sandbox = agent.mcp.servers["time"].sandbox
    assert sandbox is not None
    seen = sandbox.run(
        "for p in /proc/[0-9]*; do grep -qa mcp_server_time $p/cmdline 2>/dev/null"
        " && tr '\\0' '\\n' < $p/environ; done",
        timeout=30,
    )["output"]
    names = {line.split("=", 1)[0] for line in seen.splitlines() if "=" in line}
    assert "HM16_GIVEN=by-value" in seen and "HM16_ALLOWED=passed-by-name" in seen
    assert "HM16_SECRET" not in names and "HM16_UNSET" not in names
    assert not any(name.startswith("HERMETIC_") for name in names)
    assert "must-not-pass" not in seen


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_hung_or_killed_server_is_a_readable_error_and_restarts(
    tmp_path: Path, backend: str, closing: list[Agent]
) -> None:
    agent = open_agent(tmp_path, backend, {"time": server_config("time", timeout=5.0)})
    closing.append(agent)
    assert call(agent, "mcp_time_get_current_time", timezone="UTC").ok

    signal_server(agent, "time", "mcp_server_time", "STOP")  # hung: it reads nothing, answers nothing
    hung = call(agent, "mcp_time_get_current_time", timezone="UTC")
    assert not hung.ok and "no answer within the timeout" in hung.content and "restarted" in hung.content
    assert call(agent, "mcp_time_get_current_time", timezone="UTC").ok  # a new process answers

    # a kill in the middle of a call: the caller hears it at once, not at the timeout
    signal_server(agent, "time", "mcp_server_time", "STOP")
    results: list[ToolResult] = []
    caller = threading.Thread(
        target=lambda: results.append(call(agent, "mcp_time_get_current_time", timezone="UTC"))
    )
    caller.start()
    signal_server(agent, "time", "mcp_server_time", "KILL")
    caller.join(30)
    assert results and not results[0].ok
    assert "exited" in results[0].content or "closed" in results[0].content.lower(), results[0].content
    assert call(agent, "mcp_time_get_current_time", timezone="Europe/Paris").ok


def test_a_server_that_talks_garbage_leaves_the_agent_and_the_others_working(
    tmp_path: Path, closing: list[Agent]
) -> None:
    garbage = {
        "command": "bash",
        "args": ["-c", "while read -r line; do echo 'not json {'; done"],
        "start_timeout": 5.0,
    }
    agent = open_agent(tmp_path, "local", {"noise": garbage, "time": server_config("time")})
    closing.append(agent)
    assert agent.mcp is not None
    assert [p for p in agent.mcp.problems if p.startswith("MCP server noise:")]
    assert not [p for p in agent.mcp.problems if p.startswith("MCP server time:")]
    assert not any(name.startswith("mcp_noise") for name in agent.tools)
    assert call(agent, "mcp_time_get_current_time", timezone="UTC").ok


def test_the_npm_reference_server_runs_with_node_in_a_sandbox(tmp_path: Path, closing: list[Agent]) -> None:
    config = server_config("memory", env={"MEMORY_FILE_PATH": "/workspace/graph.jsonl"})
    agent = open_agent(tmp_path, "local", {"memory": config})
    closing.append(agent)
    assert {"mcp_memory_create_entities", "mcp_memory_read_graph"} <= set(agent.tools)
    made = call(
        agent,
        "mcp_memory_create_entities",
        entities=[{"name": "Hermetic", "entityType": "project", "observations": ["tools run sealed"]}],
    )
    assert made.ok, made.content
    graph = call(agent, "mcp_memory_read_graph")
    assert graph.ok and "tools run sealed" in graph.content


def test_the_agent_calls_an_mcp_tool_in_a_turn(tmp_path: Path, fake_llm: Any, closing: list[Agent]) -> None:
    import asyncio

    model = {"name": "openai/scripted", "api_base": fake_llm.url, "api_key": "k", "retries": 0}
    agent = open_agent(tmp_path, "local", {"time": server_config("time")}, model=model)
    closing.append(agent)
    fake_llm.load(
        [
            {"tool_calls": [{"name": "mcp_time_get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}]},
            {"text": "It is evening in Tokyo."},
        ]
    )
    conversation = agent.new_conversation()
    end = asyncio.run(conversation.run("what time is it in Tokyo?", lambda event: None))
    assert end.reason == "done"
    tools = [t["function"]["name"] for t in fake_llm.requests[0]["tools"]]
    assert "mcp_time_get_current_time" in tools
    assert "Asia/Tokyo" in fake_llm.requests[1]["messages"][-1]["content"]


def test_mcp_add_list_test_remove(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from control_plane.cli.main import app

    config = server_config("time")
    monkeypatch.setenv("HERMETIC_ROOT", str(tmp_path))
    monkeypatch.setenv("HERMETIC_BACKEND", "local")
    get_backend("local")
    runner = CliRunner()
    mount = config["mounts"][0]  # type: ignore[index]
    added = runner.invoke(
        app,
        ["mcp", "add", "clock", "--command", "python3", "--arg=-m", "--arg", "mcp_server_time"]
        + ["--env", f"PYTHONPATH={mount['target']}", "--mount", f"{mount['source']}:{mount['target']}"]
        + ["--exclude", "convert_time", "--env-allow", "HM16_ALLOWED"],
    )
    assert added.exit_code == 0, added.output
    assert load_settings(root=tmp_path).mcp_servers["clock"].exclude == ["convert_time"]
    listed = runner.invoke(app, ["mcp", "list"])
    assert "clock" in listed.output and "sandbox" in listed.output
    tested = runner.invoke(app, ["mcp", "test", "clock"])
    assert tested.exit_code == 0 and "tools: mcp_clock_get_current_time\n" in tested.output, tested.output
    refused = runner.invoke(app, ["mcp", "add", "bad name", "--command", "x"])
    assert refused.exit_code == 2 and "1-32 characters" in refused.output
    neither = runner.invoke(app, ["mcp", "add", "empty"])
    assert neither.exit_code == 2 and "either a command" in neither.output
    assert runner.invoke(app, ["mcp", "remove", "clock"]).exit_code == 0
    assert load_settings(root=tmp_path).mcp_servers == {}
    assert runner.invoke(app, ["mcp", "remove", "clock"]).exit_code == 1
