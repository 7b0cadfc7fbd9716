"""execute_code: one Python script in the sandbox that calls the agent's tools, one model step instead of
dozens. The runtime runs it (sandboxes/scripts.py) and hands each call the script makes back over the
channel; every inner call then takes the agent's one path (ToolContext.call_tool), budget included."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from sandboxes.contract_tools import CallReply, DoneEvent

from .registry import ToolContext, ToolOutcome, ToolResult, tool

REFUSED = {
    "clarify": "it waits for the user's answer, and a script cannot hold a conversation; ask directly",
    "delegate": "child agents need model steps of their own; call delegate directly",
    "execute_code": "a script cannot start another script; write one script that does all of it",
}
"""Tools a script may not call, and why (the script gets ToolRefused with the reason)."""
SCRIPT_TIMEOUT = 300.0
"""Default seconds a script may run, its inner calls included."""
LOG_LINES = 40
"""Inner calls listed one per line in the result; past it, the rest are summed up in one line."""


class ExecuteCodeArgs(BaseModel):
    code: str = Field(description="A Python 3 script. `from hermetic_tools import terminal, read_file, ...`")
    timeout: float | None = Field(
        None, gt=0, description=f"Seconds the script may run, with its calls (default {SCRIPT_TIMEOUT:g})."
    )


@tool("execute_code", toolset="code")
def execute_code(ctx: ToolContext, args: ExecuteCodeArgs) -> ToolResult:
    """Run a Python script in the sandbox that calls your tools, to do many steps in one call (loops over
    files, a command per item, filtering long output before you read it). In the script, `from
    hermetic_tools import terminal, read_file, write_file` (any tool you have, same name and arguments;
    positional arguments fill them in order); each returns the text you would have seen, a str with
    `.ok` and `.exit_code`. Print what you want to read: you get the script's output (stdout and
    stderr, capped) and a short log of its tool calls. Every call counts in the turn's tool-call
    budget; clarify, delegate and execute_code cannot be called from a script."""
    if ctx.call_tool is None:
        return ToolResult("error: execute_code is not available here (no agent runs this call)", ok=False)
    sandbox = ctx.sandbox
    timeout = min(args.timeout or SCRIPT_TIMEOUT, ctx.limits.max_tool_timeout)
    tools = {name: list(t.args.model_fields) for name, t in ctx.tools.items()}
    wait = timeout + 30  # the runtime ends the script at `timeout`; no event comes later than that
    limit = ctx.limits.tool_output * 3 // 4  # the rest is for the log of calls
    event = sandbox.runtime.script_start(
        script=args.code, tools=tools, timeout=timeout, limit=limit, call_timeout=wait
    )
    calls: list[InnerCall] = []
    while event["event"] == "call":
        name, arguments = event["name"], event["arguments"]
        if name in REFUSED:
            reason = f"{name} cannot be called from a script: {REFUSED[name]}"
            calls.append(InnerCall(name, arguments, None))
            reply: CallReply = {"refused": True, "ok": False, "content": reason}
        else:
            outcome = ctx.call_tool(name, arguments)
            calls.append(InnerCall(name, arguments, outcome))
            reply = {
                "ok": outcome.ok,
                "content": outcome.content,
                "exit_code": outcome.exit_code,
                "spent": outcome.spent,
            }
        event = sandbox.runtime.script_reply(run=event["run"], result=reply, call_timeout=wait)
    return _result(event, calls, timeout)


@dataclass(frozen=True)
class InnerCall:
    name: str
    arguments: dict[str, Any]
    outcome: ToolOutcome | None
    """None: refused (REFUSED)."""

    def line(self) -> str:
        shown = json.dumps(self.arguments, ensure_ascii=False)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        if self.outcome is None:
            return f"{self.name} {shown} -> refused"
        state = "ok" if self.outcome.ok else ("not run: budget spent" if self.outcome.spent else "failed")
        code = "" if self.outcome.exit_code is None else f", exit {self.outcome.exit_code}"
        return f"{self.name} {shown} -> {state}{code}, {self.outcome.duration_ms:.0f} ms"


def _result(done: DoneEvent, calls: list[InnerCall], timeout: float) -> ToolResult:
    """The script's output, then how it ended and a compact log of its calls."""
    code = done["exit_code"]
    if done["timed_out"]:
        end = f"the script was killed after its timeout of {timeout:g} s"
    elif done["cancelled"]:
        end = "the script was stopped: the user interrupted"
    elif done["problem"]:
        end = f"the script was stopped: {done['problem']}"
    else:
        end = f"the script exited with code {code}"
    counts = Counter(call.name for call in calls)
    summary = ", ".join(f"{name} x{n}" for name, n in counts.most_common())
    lines = [f"[{end}; {len(calls)} tool calls{': ' + summary if summary else ''}]"]
    shown = calls if len(calls) <= LOG_LINES else calls[: LOG_LINES // 2] + calls[-LOG_LINES // 2 :]
    for i, call in enumerate(shown):
        if len(calls) > LOG_LINES and i == LOG_LINES // 2:
            lines.append(f"  ... {len(calls) - LOG_LINES} more calls ...")
        lines.append(f"  {call.line()}")
    output = done["output"]
    ok = code == 0 and not done["timed_out"] and not done["cancelled"] and not done["problem"]
    text = (output if output.endswith("\n") or not output else output + "\n") + "\n".join(lines)
    return ToolResult(text, ok=ok, exit_code=124 if done["timed_out"] else code)
