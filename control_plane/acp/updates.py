"""A run's events as ACP `session/update`s: message chunks, tool calls with their terminal output and
file diffs, the todo tool's plan. One `Updates` per prompt turn (it keeps each call's output so far)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acp import (
    image_block,
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
)
from acp.helpers import SessionUpdate, ToolCallContentVariant
from acp.schema import ToolCallLocation, ToolCallStatus, ToolKind

from ..events import Error, Event, Notice, ReasoningDelta, TextDelta, Todo, ToolEnd, ToolProgress, ToolStart

KINDS: dict[str, ToolKind] = {
    "terminal": "execute",
    "process": "execute",
    "read_file": "read",
    "write_file": "edit",
    "patch": "edit",
    "search_files": "search",
    "list_files": "search",
    "session_search": "search",
    "network_request": "fetch",
    "browser_navigate": "fetch",
    "todo": "think",
}
EDITS = ("write_file", "patch")
ASKING = ("network_request", "expose_port", "clarify")
"""The tools that put a question to the user (approvals, clarify)."""
OUTPUT_TAIL = 20_000
"""Characters of a running command's output an update carries (each replaces the last)."""
PLAN_STATUS = {"pending": "pending", "in_progress": "in_progress", "done": "completed"}


class Updates:
    """Translate one turn's events; `workspace` is the editor's directory (the sandbox's workdir)."""

    def __init__(self, workspace: Path, workdir: str) -> None:
        self.workspace = workspace
        self.workdir = workdir.rstrip("/")
        self._output: dict[str, str] = {}
        self._running: dict[str, str] = {}
        """The tool calls started and not ended: call id -> tool name."""

    def of(self, event: Event) -> list[SessionUpdate]:
        if event.delegate_call:  # a child agent's steps: its parent's delegate call reports the outcome
            return []
        if isinstance(event, TextDelta):
            return [update_agent_message_text(event.text)]
        if isinstance(event, ReasoningDelta):
            return [update_agent_thought_text(event.text)]
        if isinstance(event, ToolStart):
            self._running[event.call_id] = event.name
            return [self._start(event)]
        if isinstance(event, ToolProgress):
            self._output[event.call_id] = (self._output.get(event.call_id, "") + event.text)[-OUTPUT_TAIL:]
            return [update_tool_call(event.call_id, content=[_text(self._output[event.call_id])])]
        if isinstance(event, ToolEnd):
            self._running.pop(event.call_id, None)
            output = self._output.pop(event.call_id, None)
            content = None if event.name in EDITS and event.ok else [_text(output or event.result)]
            if content is not None:  # a screenshot, a figure: shown in the editor beside the text
                content += [tool_content(image_block(image.data, image.mime)) for image in event.images]
            status: ToolCallStatus = "completed" if event.ok else "failed"
            return [update_tool_call(event.call_id, status=status, content=content, raw_output=event.result)]
        if isinstance(event, Todo):
            entries = [
                plan_entry(item.content, priority="medium", status=PLAN_STATUS[item.status])  # type: ignore[arg-type]
                for item in event.items
            ]
            return [update_plan(entries)]
        if isinstance(event, Notice | Error):
            return [update_agent_message_text(f"\n\n> {event.message}\n\n")]
        return []

    def asking_call(self) -> str | None:
        """The running call a question comes from (the latest asking tool), for the permission request."""
        asking = [call_id for call_id, name in self._running.items() if name in ASKING]
        return asking[-1] if asking else None

    def _start(self, event: ToolStart) -> SessionUpdate:
        args: dict[str, Any] = event.arguments if isinstance(event.arguments, dict) else {}
        given = args.get("path")
        path = host_path(given, self.workspace, self.workdir) if isinstance(given, str) else None
        content: list[ToolCallContentVariant] | None = None
        if event.name in EDITS and path is not None:
            content = _diff(event.name, path, args)
        return start_tool_call(
            event.call_id,
            _title(event.name, args),
            kind=KINDS.get(event.name, "other"),
            status="in_progress",
            content=content,
            locations=[ToolCallLocation(path=str(path))] if path is not None else None,
            raw_input=event.arguments,
        )


def host_path(path: str, workspace: Path, workdir: str) -> Path | None:
    """Where a sandbox path is in the editor's directory; None when it is outside the workspace."""
    workdir = workdir.rstrip("/")
    inside = path[len(workdir) :].lstrip("/") if path == workdir or path.startswith(workdir + "/") else path
    if inside.startswith("/"):
        return None
    resolved = (workspace / inside).resolve()
    return resolved if resolved.is_relative_to(workspace) else None


def _title(name: str, args: dict[str, Any]) -> str:
    for key in ("command", "path", "pattern", "url", "host", "question", "query"):
        if isinstance(args.get(key), str):
            return f"{name}: {args[key][:120]}"
    return name


def _diff(name: str, path: Path, args: dict[str, Any]) -> list[ToolCallContentVariant] | None:
    """The edit as a diff of the whole file (read before the tool runs: the start event comes first)."""
    try:
        old = path.read_text() if path.is_file() else None
    except (OSError, UnicodeDecodeError):
        old = None
    if name == "write_file" and isinstance(args.get("content"), str):
        return [tool_diff_content(str(path), args["content"], old)]
    if name == "patch" and old is not None and isinstance(args.get("old"), str):
        before, after = args["old"], str(args.get("new", ""))
        if before not in old:
            return None
        new = old.replace(before, after) if args.get("replace_all") else old.replace(before, after, 1)
        return [tool_diff_content(str(path), new, old)]
    return None


def _text(text: str) -> ToolCallContentVariant:
    return tool_content(text_block(f"```\n{text}\n```" if text else ""))
