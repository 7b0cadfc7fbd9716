"""A tool of a connected MCP server called through the agent."""

from __future__ import annotations

from typing import Any

from control_plane.agent.agent import Agent
from control_plane.tools import ToolContext, ToolResult, invoke


def call(agent: Agent, name: str, **arguments: Any) -> ToolResult:
    import json

    ctx = ToolContext(session_id="t", call_id="c", limits=agent.settings.limits, get_sandbox=lambda: None)  # type: ignore[arg-type,return-value]
    return invoke(agent.tools.get(name), name, json.dumps(arguments), ctx)
