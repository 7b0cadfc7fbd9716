"""delegate_remote: give a task to another agent over A2A and get its answer back as the result.

Only the agents listed in `remote_agents.agents` are called (exact base URLs), each with the bearer
token in the environment variable named there. The call is bounded by `remote_agents.timeout`; the
remote task's progress lines are the call's progress; an interrupt of the turn (or the timeout) cancels
the remote task. The client is tools/a2a_client.py, which `hermetic a2a call` uses too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from backends import SandboxError

from ..config.remote import RemoteAgent, RemoteAgentsSettings
from .registry import ToolContext, ToolResult, tool

if TYPE_CHECKING:
    from .a2a_client import RemoteOutcome

SETTING = "remote_agents.agents"
SAVED_INTO = "remote"
"""The directory of the workspace that receives the files a remote task sends."""
MAX_SAVED = 8 * 1024 * 1024
"""Bytes of files one call saves (a remote agent is not trusted to bound itself)."""


class DelegateRemoteArgs(BaseModel):
    url: str = Field(max_length=2000, description="The agent's base URL, exactly as listed for you.")
    task: str = Field(
        min_length=1,
        max_length=20_000,
        description="The task, self-contained (the agent sees nothing of this conversation), or, with "
        "task_id, the answer to its question.",
    )
    context_id: str = Field(
        "", max_length=200, description="Go on in the context of an earlier call (its session over there)."
    )
    task_id: str = Field(
        "", max_length=200, description="Answer the question of an earlier call's input_required task."
    )


@tool("delegate_remote", toolset="remote")
def delegate_remote(ctx: ToolContext, args: DelegateRemoteArgs) -> ToolResult:
    """Give a task to another agent over A2A (one of the agents listed for you, by its URL) and wait for
    its answer. The result says where its task ended: completed (with its answer), input_required (with
    its question: call again with task_id and context_id and the answer as task), failed, canceled or
    rejected; and the context_id to go on in the same session over there."""
    remote = ctx.settings.remote_agents if ctx.settings else RemoteAgentsSettings()
    agent = remote.find(args.url)
    if agent is None:
        listed = ", ".join(known.url for known in remote.agents) or "none"
        return ToolResult(
            f"error: {args.url} is not an agent you may call: only those in the setting {SETTING} "
            f"(listed: {listed})",
            ok=False,
        )
    token = os.environ.get(agent.token_env) if agent.token_env else None
    if agent.token_env and not token:
        return ToolResult(
            f"error: no token for {agent.url}: the environment variable {agent.token_env} "
            f"({SETTING}[].token_env) is not set",
            ok=False,
        )
    if ctx.cancelled.is_set():
        return ToolResult("error: not sent: the user interrupted", ok=False)
    from .a2a_client import RemoteAgentError  # the SDK is imported when a call needs it

    try:
        outcome, why = asyncio.run(_call(ctx, agent, token, args, remote.timeout))
    except RemoteAgentError as exc:
        hint = f" (is {agent.token_env} the agent's token?)" if exc.status in (401, 403) else ""
        return ToolResult(f"error: the call to {agent.url} failed: {exc}{hint}", ok=False)
    return _result(agent, outcome, why, _save(ctx, outcome.files) if outcome.files else [])


async def _call(
    ctx: ToolContext, agent: RemoteAgent, token: str | None, args: DelegateRemoteArgs, timeout: float
) -> tuple[RemoteOutcome, str]:
    """The remote task followed in this worker thread's own loop until it ends, the turn is interrupted
    or the time is up (then it is canceled); with why it was stopped ('' when it was not)."""
    from .a2a_client import call_agent

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    why: list[str] = []

    def stopping(reason: str) -> None:
        why.append(reason)
        stop.set()

    def interrupted() -> None:  # from the interrupting thread
        with contextlib.suppress(RuntimeError):  # the call is over and its loop closed
            loop.call_soon_threadsafe(stopping, "the user interrupted")

    def progress(line: str) -> None:
        ctx.progress(line if line.endswith("\n") else line + "\n")

    forget = ctx.cancelled.on_set(interrupted)
    timer = loop.call_later(timeout, stopping, f"no end after {timeout:g} s (remote_agents.timeout)")
    try:
        outcome = await call_agent(
            agent.url,
            args.task,
            token=token,
            context_id=args.context_id,
            task_id=args.task_id,
            on_progress=progress,
            timeout=timeout,
            stop=stop,
        )
    finally:
        timer.cancel()
        forget()
    return outcome, why[0] if outcome.stopped and why else ""


def _save(ctx: ToolContext, files: dict[str, bytes]) -> list[str]:
    """Write the task's files under SAVED_INTO/ in the caller's workspace; a line for each."""
    lines: list[str] = []
    total = 0
    with tempfile.TemporaryDirectory(prefix="hermetic-remote-") as spool:
        top = Path(spool) / SAVED_INTO
        for name, data in files.items():
            path = PurePosixPath(name)
            if path.is_absolute() or not path.parts or {"..", "."} & set(path.parts) or "\0" in name:
                lines.append(f"not saved: {name!r} is not a relative path")
                continue
            if total + len(data) > MAX_SAVED:
                lines.append(f"not saved: {name} ({len(data)} bytes): over {MAX_SAVED} bytes a call")
                continue
            (top / path).parent.mkdir(parents=True, exist_ok=True)
            (top / path).write_bytes(data)
            total += len(data)
            lines.append(f"saved: {SAVED_INTO}/{path} ({len(data)} bytes)")
        try:
            if top.is_dir():
                ctx.sandbox.upload(top, ".")
        except SandboxError as exc:  # the answer still comes back
            return [f"not saved: {exc}"]
    return lines


def _result(agent: RemoteAgent, outcome: RemoteOutcome, why: str, saved: list[str]) -> ToolResult:
    """Where the task ended and what it said, then how to go on."""
    lines = [f"remote task {outcome.task_id} (context {outcome.context_id}) at {agent.url}: {outcome.state}"]
    if why:
        lines.append(f"stopped: {why}; the remote task was canceled")
    lines.append(outcome.message or "(no message)")
    for name, text in outcome.artifacts.items():
        if text.strip() and text.strip() != outcome.message.strip():
            lines.append(f"[artifact {name}]\n{text}")
    if saved:
        lines.append("[files it sent, in your workspace]\n" + "\n".join(saved))
    if outcome.state == "input_required":
        lines.append(
            f"to answer: delegate_remote with url={agent.url}, task=<the answer>, "
            f"task_id={outcome.task_id}, context_id={outcome.context_id}"
        )
    return ToolResult("\n".join(lines), ok=outcome.state == "completed")
