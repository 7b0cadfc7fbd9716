"""`hermetic mcp serve` driven by the official `mcp` SDK as the client: over stdio (a real subprocess,
both the 2026-07-28 per-request protocol and the 2025-11-25 initialize handshake) and over streamable
HTTP behind a bearer token."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import get_backend
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from served_app import scripted_profiles, serve_app

from control_plane.agent.agent import Agent
from control_plane.api.app import create_app
from control_plane.config.settings import load_settings
from control_plane.mcp.server import McpSurface, build_server
from control_plane.mcp.transports import http_app
from control_plane.memory.store import Memory, Op
from control_plane.store.tokens import TokenStore
from control_plane.tools import TOOLS, ToolContext, invoke

MODES = ["2026-07-28", "legacy"]
SANDBOX_TOOLS = {"terminal", "process", "read_file", "write_file", "patch", "search_files", "list_files"}


def text(result: Any) -> str:
    return "".join(block.text for block in result.content)


@pytest.fixture
def stdio(tmp_path: Path, fake_llm: Any) -> StdioServerParameters:
    get_backend("local")
    env = {
        "PATH": os.environ["PATH"],
        "HERMETIC_ROOT": str(tmp_path),
        "HERMETIC_BACKEND": "local",
        "HERMETIC_MODEL__NAME": "openai/scripted",
        "HERMETIC_MODEL__API_BASE": fake_llm.url,
        "HERMETIC_MODEL__API_KEY": "k-test",
        "HERMETIC_MODEL__RETRIES": "0",
        "HERMETIC_LEARNING__ENABLED": "false",
    }
    return StdioServerParameters(
        command=sys.executable, args=["-m", "control_plane", "mcp", "serve"], env=env
    )


@pytest.mark.parametrize("mode", MODES)
def test_sandbox_tools_over_stdio_keep_one_sandbox_per_session(
    stdio: StdioServerParameters, mode: str
) -> None:
    async def session() -> None:
        async with Client(stdio, mode=mode) as client:
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert SANDBOX_TOOLS | {"session_search", "memory", "skills_list", "skill_view"} <= set(listed)
            assert {"sandbox_reset", "agent_run"} <= set(listed)
            assert "skill_manage" not in listed  # read-only views only
            # one definition: the schema the model sees is the schema MCP clients see
            for name in SANDBOX_TOOLS:
                tool = TOOLS.get(name)
                assert (
                    tool is not None and listed[name].input_schema == tool.schema()["function"]["parameters"]
                )
            assert set(listed["memory"].input_schema["properties"]) == {"target"}

            first = await client.call_tool("terminal", {"command": "export KEPT=42; cd /tmp; echo set"})
            assert not first.is_error and "set" in text(first)
            again = await client.call_tool("terminal", {"command": "echo $KEPT $PWD"})
            assert "42 /tmp" in text(again)
            wrote = await client.call_tool(
                "write_file", {"path": "/workspace/a.txt", "content": "one\ntwo\n"}
            )
            assert not wrote.is_error
            patched = await client.call_tool("patch", {"path": "/workspace/a.txt", "old": "two", "new": "2"})
            assert "1 replacement" in text(patched)
            read = await client.call_tool("read_file", {"path": "/workspace/a.txt"})
            assert "one" in text(read) and "2" in text(read)

            failed = await client.call_tool("terminal", {"command": "exit 3"})
            assert failed.is_error and "exit code 3" in text(failed)
            bad = await client.call_tool("terminal", {"cmd": "ls"})
            assert bad.is_error and "invalid arguments for terminal: command" in text(bad)
            with pytest.raises(MCPError, match="no tool named"):
                await client.call_tool("rm_rf", {})

            reset = await client.call_tool("sandbox_reset", {})
            assert "fresh" in text(reset)
            fresh = await client.call_tool("terminal", {"command": "echo [$KEPT]; ls /workspace"})
            assert "[]" in text(fresh) and "a.txt" not in text(fresh)

    asyncio.run(session())


def test_memory_and_skills_are_read_only_views(stdio: StdioServerParameters, tmp_path: Path) -> None:
    home = load_settings(root=tmp_path)
    Memory(home.home, home.memory).apply("memory", [Op(op="add", text="The build uses make -j2.")])

    async def session() -> None:
        async with Client(stdio) as client:
            memory = await client.call_tool("memory", {"target": "memory"})
            assert "make -j2" in text(memory)
            sneaky = await client.call_tool(
                "memory", {"target": "memory", "ops": [{"op": "add", "text": "written by a client"}]}
            )
            assert "written by a client" not in text(sneaky)  # the extra field is ignored: no edit
            skills = await client.call_tool("skills_list", {})
            assert not skills.is_error

    asyncio.run(session())
    assert "written by a client" not in (tmp_path / "MEMORY.md").read_text()


@pytest.mark.parametrize("mode", MODES)
def test_agent_run_streams_progress_and_returns_the_answer(
    stdio: StdioServerParameters, fake_llm: Any, mode: str
) -> None:
    fake_llm.load(
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo delegated-$((2+3))"}}]},
            {"text": "The answer is delegated-5."},
        ]
    )
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async def session() -> str:
        async with Client(stdio, mode=mode) as client:
            result = await client.call_tool(
                "agent_run", {"task": "compute it"}, progress_callback=on_progress
            )
            assert not result.is_error
            return text(result)

    answer = asyncio.run(session())
    assert answer.startswith("The answer is delegated-5.")
    messages = [message or "" for _, message in progress]
    assert any(m.startswith("terminal") for m in messages) and any("done" in m for m in messages)
    assert [value for value, _ in progress] == sorted(value for value, _ in progress)
    assert "delegated-5" in fake_llm.requests[1]["messages"][-1]["content"]  # the tool really ran


@pytest.fixture
def served_http(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """`mcp serve --http`'s app on a free port; yields its URL, a token of its profile and another's."""
    get_backend("local")
    settings = load_settings(root=tmp_path, backend="local", learning={"enabled": False})
    tokens = TokenStore(tmp_path)
    mine, other = tokens.create("default"), tokens.create("other")
    agent = Agent(settings)
    with serve_app(http_app(McpSurface(agent), tokens, "127.0.0.1")) as url:
        yield f"{url}/mcp", mine, other
    agent.close()


@pytest.mark.parametrize("mode", MODES)
def test_streamable_http_needs_a_token_of_the_profile(served_http: tuple[str, str, str], mode: str) -> None:
    url, mine, other = served_http

    async def session(token: str) -> str:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode) as client,
        ):
            await client.call_tool("terminal", {"command": "export T=over-http"})
            return text(await client.call_tool("terminal", {"command": "echo $T"}))

    assert "over-http" in asyncio.run(session(mine))
    for refused in (other, "hmt_forged"):
        with pytest.raises(ExceptionGroup) as raised:  # the SDK's task groups wrap the server's error
            asyncio.run(session(refused))
        assert raised.group_contains(MCPError, match="bearer token of profile default", depth=None)
    plain = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert plain.status_code == 401 and plain.json()["error"]["code"] == -32001


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[tuple[Agent, McpSurface]]:
    """An agent and its MCP surface in this process (the connection is the session), results clipped at
    500 characters, checkpoints before file writes only."""
    get_backend("local")
    settings = load_settings(
        root=tmp_path,
        backend="local",
        learning={"enabled": False},
        limits={"tool_output": 500},
        snapshots={"checkpoint_terminal": False},
    )
    agent = Agent(settings)
    yield agent, McpSurface(agent)
    for snapshot in agent.sandboxes.snapshots.list():
        agent.sandboxes.backend.delete_snapshot(snapshot.id)
    agent.close()


def test_an_idle_sessions_sandbox_is_closed(in_process: tuple[Agent, McpSurface]) -> None:
    agent, surface = in_process

    async def session() -> None:
        async with Client(build_server(surface)) as client:
            await client.call_tool("terminal", {"command": "export A=1"})
            [session_id] = surface.sessions.values()
            assert surface.reap(idle_seconds=3600) == []
            assert surface.reap(idle_seconds=0) == [session_id]
            assert agent.sandboxes.peek(session_id) is None
            assert "[]" in text(await client.call_tool("terminal", {"command": "echo [$A]"}))

    asyncio.run(session())


def test_a_call_is_clipped_audited_and_checkpointed_like_the_loops(
    in_process: tuple[Agent, McpSurface],
) -> None:
    agent, surface = in_process
    long_output = "head -c 3000 /dev/zero | tr '\\0' a; echo; echo END"

    async def session() -> list[str]:
        async with Client(build_server(surface)) as client:
            said = [await client.call_tool("terminal", {"command": long_output})]
            for content in ("one\n", "two\n"):
                said.append(await client.call_tool("write_file", {"path": "b.txt", "content": content}))
            said.append(await client.call_tool("terminal", {"command": "exit 4"}))
            agent.checkpoints.rollback(next(iter(surface.sessions.values())), 1)
            said.append(await client.call_tool("read_file", {"path": "b.txt"}))
            return [text(result) for result in said]

    clipped, _, _, failed, after_rollback = asyncio.run(session())
    assert "characters cut" in clipped and "END" in clipped[-100:] and len(clipped) < 700
    [session_id] = surface.sessions.values()
    record = agent.store.get_session(session_id, "default")
    assert record is not None and record.source == "mcp"
    rows = agent.store.tool_calls(session_id)  # written before each result went back
    assert [(row.tool, row.ok, row.exit_code) for row in rows[:4]] == [
        ("terminal", True, 0),
        ("write_file", True, None),
        ("write_file", True, None),
        ("terminal", False, 4),
    ]
    assert rows[0].backend == "local" and rows[0].sandbox_id and "exit code 4" in failed
    # each call is a turn of its own: both writes were checkpointed; the first checkpoint had no b.txt
    assert [c.meta["tool"] for c in agent.checkpoints.list(session_id)] == ["write_file", "write_file"]
    assert "rolled back to checkpoint 1" in after_rollback and "b.txt does not exist" in after_rollback


def test_execute_code_runs_its_calls_through_the_same_path(in_process: tuple[Agent, McpSurface]) -> None:
    agent, surface = in_process
    code = (
        "from hermetic_tools import ToolRefused, call, terminal, write_file\n"
        "print(terminal('echo inner-$((6*7))'))\n"
        "write_file(path='s.txt', content='from a script')\n"
        "try:\n"
        "    call('sandbox_reset')\n"
        "except ToolRefused:\n"
        "    print('no sandbox_reset in a script')\n"
    )

    async def session() -> tuple[str, str]:
        async with Client(build_server(surface)) as client:
            ran = await client.call_tool("execute_code", {"code": code})
            read = await client.call_tool("read_file", {"path": "s.txt"})
            return text(ran), text(read)

    ran, read = asyncio.run(session())
    assert "inner-42" in ran and "no sandbox_reset in a script" in ran and "from a script" in read
    [session_id] = surface.sessions.values()
    rows = agent.store.tool_calls(session_id)
    outer = rows[2].call_id  # the script's row comes after its calls' rows
    assert [(row.tool, row.call_id) for row in rows[:3]] == [
        ("terminal", f"{outer}.1"),
        ("write_file", f"{outer}.2"),
        ("execute_code", outer),
    ]
    assert [c.meta["tool"] for c in agent.checkpoints.list(session_id)] == ["write_file"]


def test_the_agent_uses_an_http_mcp_server_with_its_headers(
    served_http: tuple[str, str, str], tmp_path: Path
) -> None:
    """The client side over HTTP, against this server: the remote's tools join as mcp_remote_*."""
    url, mine, _ = served_http
    servers = {
        "remote": {"url": url, "headers": {"Authorization": f"Bearer {mine}"}, "include": ["terminal"]},
        "locked": {"url": url, "start_timeout": 10},
    }
    agent = Agent(load_settings(root=tmp_path / "client", backend="local", mcp_servers=servers))
    try:
        assert [n for n in agent.tools if n.startswith("mcp_")] == ["mcp_remote_terminal"]
        assert agent.mcp is not None and any(
            "locked" in p and "bearer token" in p for p in agent.mcp.problems
        )
        ctx = ToolContext(session_id="t", call_id="c", limits=agent.settings.limits, get_sandbox=lambda: None)  # type: ignore[arg-type,return-value]
        tool = agent.tools["mcp_remote_terminal"]
        result = invoke(tool, tool.name, '{"command": "echo remote-$((40+2))"}', ctx)
        assert result.ok and "remote-42" in result.content
    finally:
        agent.close()


def test_hermetic_serve_serves_mcp_for_the_profile_of_the_token(tmp_path: Path, fake_llm: Any) -> None:
    """`/mcp` of `hermetic serve`: the caller's token picks the profile, and a session belongs to the
    profile that opened it (another profile's token is told it does not exist)."""
    get_backend("local")
    tokens = TokenStore(tmp_path)
    alpha, beta = tokens.create("alpha"), tokens.create("beta")
    settings_for = scripted_profiles(tmp_path, fake_llm.url, learning={"enabled": False})
    with serve_app(create_app(tmp_path, settings_for)) as url:

        async def session() -> str:
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {alpha}"}, timeout=60) as http,
                Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as client,
            ):
                await client.call_tool("terminal", {"command": "export T=served"})
                return text(await client.call_tool("terminal", {"command": "echo $T"}))

        assert "served" in asyncio.run(session())
        accept = {"Accept": "application/json, text/event-stream"}
        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        opened = httpx2.post(
            f"{url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
            headers={**accept, "Authorization": f"Bearer {alpha}"},
        )
        assert opened.status_code == 200, opened.text
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        as_beta = {
            **accept,
            "Authorization": f"Bearer {beta}",
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
        }
        assert httpx2.post(f"{url}/mcp", json=listing, headers=as_beta).status_code == 404
        assert httpx2.post(f"{url}/mcp", json=listing, headers=accept).status_code == 401
