"""Limits a sandbox ran into during a tool call (an OOM kill, a fork refused at pids.max): a line in the
tool's result for the model, and a notice on the session's event stream for the user."""

from __future__ import annotations

from .registry import ToolContext


def limits_note(ctx: ToolContext) -> str:
    """Lines for the tool result (empty when no limit was hit since the last call); also notifies."""
    hits = ctx.sandbox.limits_hit()
    for hit in hits:
        ctx.notify(f"sandbox limit: {hit}")
    return "".join(f"\n[sandbox limit: {hit}]" for hit in hits)
