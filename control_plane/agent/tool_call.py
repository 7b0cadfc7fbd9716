"""The one path of a tool call, whoever asks for it (the loop for the model, execute_code for a script):
budget, checkpoint, the sandbox held in use, invoke, notices, redaction, clipping, the audit row, end
event. The caller emits `tool_start(call)` first, from its own thread (the loop announces a parallel
batch's calls before any of them runs)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..events import Event, Notice, ToolEnd, ToolStart
from ..models.router import ToolCall
from ..safety.redaction import clip
from ..tools import Tool, ToolContext, ToolOutcome, ToolResult, invoke
from ..tools.images import MAX_IMAGES
from .base import AgentBase
from .budget import Budget
from .calls import parsed

log = logging.getLogger("hermetic.agent")


def run_tool_call(
    agent: AgentBase,
    tool: Tool[Any] | None,
    call: ToolCall,
    ctx: ToolContext,
    budget: Budget,
    emit: Callable[[Event], None],
    write: Callable[..., None],
) -> ToolOutcome:
    """Run one call in this (worker) thread; `emit` must be safe to call from it, `write` queues a
    database write. Every failure is a result the caller can read."""
    arguments = parsed(call.arguments)
    started_at = time.time()
    started = time.perf_counter()
    spent = not budget.take_tool_call()
    if spent:
        result = ToolResult(
            f"error: not run: this turn's budget of {budget.tool_limit} tool calls is spent "
            "(limits.max_tool_calls); answer with what you have, or ask the user to go on",
            ok=False,
        )
        notices: list[str] = []
    else:
        result, notices = _execute(agent, tool, call, ctx)
        sandbox = agent.sandboxes.peek(ctx.session_id)
        write(
            agent.store.record_tool_call,
            ctx.session_id,
            call_id=call.id,
            tool=call.name,
            arguments=arguments,
            backend=agent.sandboxes.backend.name if sandbox else None,
            sandbox_id=sandbox.id if sandbox else None,
            started_at=started_at,
            duration_ms=(time.perf_counter() - started) * 1000,
            exit_code=result.exit_code,
            ok=result.ok,
            error=None if result.ok else result.content[:2000],
        )
    duration = (time.perf_counter() - started) * 1000
    for notice in notices:
        emit(Notice(message=notice))
    prefix = "".join(f"[notice: {notice}]\n" for notice in notices)
    content = clip(agent.redact(prefix + result.content), agent.settings.limits.tool_output)
    images = tuple(result.images[:MAX_IMAGES])
    emit(
        ToolEnd(
            call_id=call.id,
            name=call.name,
            ok=result.ok,
            result=content,
            duration_ms=duration,
            exit_code=result.exit_code,
            images=list(images),
        )
    )
    return ToolOutcome(content, result.ok, result.exit_code, duration, spent, images)


def tool_start(call: ToolCall) -> ToolStart:
    return ToolStart(call_id=call.id, name=call.name, arguments=parsed(call.arguments))


def _execute(
    agent: AgentBase, tool: Tool[Any] | None, call: ToolCall, ctx: ToolContext
) -> tuple[ToolResult, list[str]]:
    """The call itself and the sandbox's notices, gathered once."""
    if tool is not None:
        agent.checkpoints.before_tool_call(ctx.session_id, call.name, ctx.turn_state, ctx.notify)
    try:
        with agent.sandboxes.using(ctx.session_id):
            result = invoke(tool, call.name, call.arguments, ctx)
    except Exception as exc:  # a tool's bug must not end the run
        log.exception("tool %s failed", call.name)
        result = ToolResult(f"error: {call.name} failed: {type(exc).__name__}: {exc}", ok=False)
    sandbox = agent.sandboxes.peek(ctx.session_id)
    notices = agent.sandboxes.pop_notices(ctx.session_id) + (sandbox.pop_notices() if sandbox else [])
    return result, notices
