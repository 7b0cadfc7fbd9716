"""memory: the model reads and edits its curated memory (MEMORY.md and USER.md) in the profile home."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ..memory.store import FILES, MemoryFileError, Op
from .registry import ToolContext, ToolResult, tool

STOP_AFTER = 3
"""Refused (over the limit) writes to one file in one user turn, after which the tool says to stop."""


class MemoryTarget(BaseModel):
    """Which memory file (also the read-only view `hermetic mcp serve` offers)."""

    target: Literal["memory", "user"] = Field(
        description="memory: your notes (environment, tools, conventions, lessons learned); "
        "user: about the user (who they are, their preferences, how they like to work)."
    )


class MemoryArgs(MemoryTarget):
    ops: list[Op] = Field(
        default_factory=list,
        description="Edits applied in order, all or nothing. Leave out to read the entries and usage.",
    )


@tool("memory", toolset="memory")
def memory(ctx: ToolContext, args: MemoryArgs) -> ToolResult:
    """Your long-term memory, loaded into the system prompt of every future session (the copy in this
    session's prompt is frozen at its start). Save durable facts: how the environment works, project
    conventions, lessons from mistakes, the user's preferences and corrections; not task progress. Keep
    entries short and self-contained. add appends an entry; replace and remove find one entry by a piece of
    its text that no other entry contains. Each file has a hard character limit: when a write is refused,
    consolidate in the same call (replace entries with merged, shorter ones, remove stale ones, then add).
    Without ops, returns the entries and how full the file is."""
    if ctx.memory is None:
        return ToolResult("error: memory is not enabled in this session", ok=False)
    name = FILES[args.target]
    refusals = f"memory.refused.{args.target}"
    try:
        if not args.ops:
            outcome = ctx.memory.read(args.target)
        elif ctx.turn_state.get(refusals, 0) >= STOP_AFTER:
            return ToolResult(f"error: {name} stays as it is for this turn; stop editing it", ok=False)
        else:
            outcome = ctx.memory.apply(args.target, args.ops)
    except MemoryFileError as exc:
        return ToolResult(f"error: {exc}", ok=False)
    message = outcome.message
    if outcome.over_limit:
        ctx.turn_state[refusals] = ctx.turn_state.get(refusals, 0) + 1
        if ctx.turn_state[refusals] >= STOP_AFTER:
            message += (
                f"\n{STOP_AFTER} writes to {name} were refused this turn: stop trying to save to it now and "
                "carry on with the task; the user has been told it is full."
            )
            ctx.notify(f"{name} is full ({outcome.usage}) and the agent could not consolidate it; review it")
    elif outcome.warn and args.ops and outcome.ok:
        ctx.notify(f"{name} is nearly full ({outcome.usage}); the agent is asked to consolidate it")
    return ToolResult(message, ok=outcome.ok)
