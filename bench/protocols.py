"""Issue 16's figures: what MCP and the OpenAI-compatible endpoint add.

- a `terminal` call of `true` through `hermetic mcp serve` over stdio (the official `mcp` client, a real
  subprocess) vs the same call through the Python API (the registry's `invoke` on the same backend);
- an MCP server's tool call (mcp-server-time's get_current_time) with the server in a sandbox of the
  backend vs on the host;
- the OpenAI endpoint's time to the first streamed content byte vs the scripted model's own
  (bench/openai_stream.py).

    python -m bench.protocols [-n 500] [--backend docker] [--servers DIR]

`--servers` is where mcp-server-time is installed (`pip install --target DIR/time mcp-server-time`;
the MCP client tests install it into the venv's mcp-test-servers).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from backends import Sandbox
from control_plane.agent.agent import Agent
from control_plane.config.settings import load_settings
from control_plane.tools import TOOLS, ToolContext, invoke

from .openai_stream import openai_first_byte
from .stats import Results, report, sample


def terminal_over_mcp(backend: str, n: int) -> list[float]:
    with tempfile.TemporaryDirectory() as root:
        env = {"PATH": os.environ["PATH"], "HERMETIC_ROOT": root, "HERMETIC_BACKEND": backend}
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "control_plane", "mcp", "serve"], env=env
        )

        async def run() -> list[float]:
            async with Client(params, mode="2026-07-28") as client:
                for _ in range(3):
                    await client.call_tool("terminal", {"command": "true"})
                times = []
                for _ in range(n):
                    start = time.perf_counter()
                    await client.call_tool("terminal", {"command": "true"})
                    times.append(time.perf_counter() - start)
                return times

        return asyncio.run(run())


def terminal_in_process(backend: str, n: int) -> list[float]:
    with tempfile.TemporaryDirectory() as root:
        agent = Agent(load_settings(root=root, backend=backend))
        tool = TOOLS.get("terminal")
        ctx = ToolContext(
            session_id="bench",
            call_id="c",
            limits=agent.settings.limits,
            get_sandbox=lambda: agent.sandboxes.get("b"),
        )
        try:
            return sample(lambda: invoke(tool, "terminal", '{"command": "true"}', ctx), n)
        finally:
            agent.close()


def time_server_call(backend: str, servers: Path, n: int, host: bool) -> list[float]:
    code = servers / "time"
    config: dict[str, Any] = {
        "command": "python3",
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
    }
    if host:
        config |= {"host": True, "env": {"PYTHONPATH": str(code)}}
    else:
        config |= {
            "env": {"PYTHONPATH": "/opt/mcp/time"},
            "mounts": [{"source": str(code), "target": "/opt/mcp/time"}],
        }
    with tempfile.TemporaryDirectory() as root:
        agent = Agent(load_settings(root=root, backend=backend, mcp_servers={"time": config}))
        tool = agent.tools["mcp_time_get_current_time"]
        ctx = ToolContext(
            session_id="bench", call_id="c", limits=agent.settings.limits, get_sandbox=_no_sandbox
        )
        call: Callable[[], object] = lambda: invoke(tool, tool.name, '{"timezone": "UTC"}', ctx)  # noqa: E731
        try:
            return sample(call, n)
        finally:
            agent.close()


def _no_sandbox() -> Sandbox:
    raise RuntimeError("an MCP server's tool uses no sandbox of the session")


def added(name: str, base: list[float], through: list[float]) -> str:
    return f"{name}: +{(statistics.median(through) - statistics.median(base)) * 1000:.2f} ms median"


def collect(n: int, backend: str, servers: Path) -> Results:
    results: Results = {}
    api = terminal_in_process(backend, n)
    mcp = terminal_over_mcp(backend, n)
    results[f"{backend}: terminal `true`, Python API (invoke)"] = api
    results[f"{backend}: terminal `true`, via mcp serve (stdio) — {added('added', api, mcp)}"] = mcp
    if (servers / "time").is_dir():
        hosted = time_server_call(backend, servers, n, host=True)
        sealed = time_server_call(backend, servers, n, host=False)
        results["mcp-server-time call, server on the host"] = hosted
        results[f"mcp-server-time call, server in a {backend} sandbox — {added('added', hosted, sealed)}"] = (
            sealed
        )
    figures = openai_first_byte(max(n // 5, 10))
    results.update({f"first content byte, {name}": samples for name, samples in figures.items()})
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=500)
    parser.add_argument("--backend", default="docker")
    parser.add_argument("--servers", type=Path, default=Path(sys.prefix) / "mcp-test-servers")
    args = parser.parse_args()
    results = collect(args.iterations, args.backend, args.servers)
    report("MCP and /v1 overhead", results, Path(__file__).parent / "results", {"backend": args.backend})
