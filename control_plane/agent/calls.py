"""Tool calls between the model's wire format and the loop: batches, parsed arguments."""

from __future__ import annotations

import json
from typing import Any

from ..models.router import ToolCall
from ..tools import Tool


def groups(calls: list[ToolCall], tools: dict[str, Tool[Any]]) -> list[list[ToolCall]]:
    """Consecutive parallel-safe calls form one group; every other call is a group of its own."""
    groups: list[list[ToolCall]] = []
    joinable = False
    for call in calls:
        tool = tools.get(call.name)
        safe = tool is not None and tool.parallel_safe
        if safe and joinable:
            groups[-1].append(call)
        else:
            groups.append([call])
        joinable = safe
    return groups


def parsed(arguments: str) -> dict[str, Any] | str:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments
    return value if isinstance(value, dict) else arguments


def wire_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
