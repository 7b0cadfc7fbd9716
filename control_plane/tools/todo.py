"""todo: the agent's short plan, items with a status, shown to the user as it changes.

The plan lives on the conversation (`ctx.todo`). It is kept with the session through the audit rows of
the todo calls (`replay` rebuilds it on resume), and after a compression the system prompt carries it
(`plan_block`), so it survives both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ..events import Todo, TodoItem
from .registry import ToolContext, ToolResult, tool

MAX_ITEMS = 30
MARKS = {"pending": "[ ]", "in_progress": "[>]", "done": "[x]"}


class TodoArgs(BaseModel):
    items: list[TodoItem] | None = Field(
        None,
        max_length=MAX_ITEMS,
        description="The plan's items. Omit to read the plan. Without merge they replace the whole plan.",
    )
    merge: bool = Field(
        False,
        description="true: update the items with these ids (status, content) and append new ids; the rest "
        "stay as they are.",
    )


@tool("todo", toolset="todo")
def todo(ctx: ToolContext, args: TodoArgs) -> ToolResult:
    """Keep a short plan for multi-step work: items (id, content, status pending/in_progress/done), in
    order. Write it when a task takes several steps, keep one item in_progress, mark items done as you
    finish them (merge=true with just the changed items). The user sees the plan as it changes. Call it
    without items to read the plan."""
    if args.items is not None:
        updated = apply(ctx.todo, args)
        if len(updated) > MAX_ITEMS:
            return ToolResult(f"error: a plan has at most {MAX_ITEMS} items; merge fewer", ok=False)
        ctx.todo[:] = updated
        ctx.emit(Todo(items=list(updated)))
    return ToolResult(render(ctx.todo))


def apply(plan: list[TodoItem], args: TodoArgs) -> list[TodoItem]:
    """The plan after one todo call (the same function replays the calls of a resumed session)."""
    items = args.items or []
    if not args.merge:
        return list({item.id: item for item in items}.values())
    by_id = {item.id: item for item in items}
    merged = [by_id.pop(item.id, item) for item in plan]
    return merged + list(by_id.values())


def render(plan: list[TodoItem]) -> str:
    if not plan:
        return "the plan is empty"
    done = sum(item.status == "done" for item in plan)
    lines = [f"plan: {done} of {len(plan)} done"]
    lines += [f"{MARKS[item.status]} {item.id}. {item.content}" for item in plan]
    return "\n".join(lines)


def replay(calls: Iterable[tuple[str, Any, bool]]) -> list[TodoItem]:
    """The plan a session's todo calls left: (tool, arguments, ok) in call order, as the audit keeps them."""
    plan: list[TodoItem] = []
    for name, arguments, ok in calls:
        if name != "todo" or not ok or not isinstance(arguments, dict):
            continue
        try:
            args = TodoArgs.model_validate(arguments)
        except ValidationError:
            continue
        if args.items is not None:
            plan = apply(plan, args)
    return plan


def plan_block(plan: list[TodoItem]) -> str:
    """The plan for the system prompt after a compression; empty when there is none."""
    if not plan:
        return ""
    return "Your plan so far (the todo tool; earlier turns were condensed):\n" + render(plan)
