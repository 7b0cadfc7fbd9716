"""terminal and process: a persistent shell in the session's sandbox, and background processes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from .interactive import KEY_NAMES, drive_terminal, is_terminal_id, open_terminal
from .limits import limits_note
from .network import egress_note
from .registry import ToolContext, ToolResult, tool
from .watching import after_change


class TerminalArgs(BaseModel):
    command: str = Field(description="A bash command line; it runs in the session's persistent shell.")
    timeout: float | None = Field(
        None,
        gt=0,
        description="Seconds before the command is interrupted (default 120; long builds: more); with "
        "interactive: seconds to wait for its first output (default 3).",
    )
    background: bool = Field(
        False,
        description="Start as a background process and return its id at once (servers, watchers, long jobs); "
        "follow it with the process tool.",
    )
    interactive: bool = Field(
        False,
        description="Run it on a terminal of its own (a PTY) and return the rendered screen once output "
        "settles: REPLs, password prompts, editors, top, installers that ask questions. Returns a "
        "terminal id (t1, ...) to type into with process(action='send').",
    )
    wait_for: str | None = Field(
        None,
        max_length=4096,
        description="With background or interactive: a path (file or directory, relative to the workspace); "
        "return once something under it is created, modified, deleted or moved, listing the changes, or "
        "after `timeout` seconds (default 60). For 'start the dev server, then wait until dist/ changes'.",
    )


@tool("terminal", toolset="terminal")
def terminal(ctx: ToolContext, args: TerminalArgs) -> ToolResult:
    """Run a command in a persistent bash session inside the sandbox: the working directory, variables
    and activated environments carry over between calls. Output is stripped of terminal escapes and cut
    in the middle when long. The sandbox has no network unless the operator allowed it."""
    sandbox = ctx.sandbox
    if ctx.cancelled.is_set():  # interrupted while the sandbox was made: there was no shell to stop
        return ToolResult("[not run: the user interrupted before the command started]", ok=False)
    if args.wait_for is not None:
        if not (args.interactive or args.background):
            return ToolResult("error: wait_for needs background=true or interactive=true", ok=False)
        waited = min(args.timeout or 60.0, ctx.limits.max_tool_timeout)
        return after_change(ctx, args.wait_for, waited, lambda: _start(ctx, args, 3.0))
    if args.interactive or args.background:
        return _start(ctx, args, args.timeout or 3.0)
    timeout = min(args.timeout or ctx.limits.tool_timeout, ctx.limits.max_tool_timeout)
    result = sandbox.run(args.command, timeout=timeout, on_output=ctx.progress)
    parts = []
    if result.get("background_output"):
        parts.append(f"[output of background jobs since the last command]\n{result['background_output']}\n")
    parts.append(result["output"])
    parts.append(egress_note(sandbox))
    parts.append(limits_note(ctx))
    if result["timed_out"]:
        parts.append(
            f"\n[timed out after {timeout:g} s: the command was interrupted; the shell session goes on. "
            "Use background=true for long-running work]"
        )
        return ToolResult("".join(parts), ok=False, exit_code=124)
    code = int(result["exit_code"])
    parts.append(f"\n[exit code {code} · cwd {result.get('cwd', '?')}]")
    return ToolResult("".join(parts), ok=code == 0, exit_code=code)


class ProcessArgs(BaseModel):
    action: Literal["list", "poll", "log", "wait", "kill", "write", "send", "resize"] = Field(
        description="list: all background processes and terminals; poll: status (a terminal: its screen); "
        "log: output since `offset`; wait: until it exits or `timeout`; kill: stop it; write: send `data` to "
        "its stdin; send: type `keys` into an interactive terminal and return its new screen; resize: give "
        "a terminal `rows` x `cols`."
    )
    id: str | None = Field(
        None,
        description="The id from terminal(background=true) (p1, ...) or terminal(interactive=true) "
        "(t1, ...); not for list.",
    )
    offset: int | None = Field(None, ge=0, description="log: byte offset to read from (from the last log).")
    timeout: float = Field(30.0, gt=0, le=600, description="wait: most seconds to wait.")
    data: str = Field("", description="write: text for the process's stdin.")
    keys: list[str] = Field(
        default_factory=list,
        max_length=200,
        description="send: what to type, in order; each item a named key or, when it names none, literal "
        f'text: ["print(1)", "Enter"], ["Esc", ":wq", "Enter"], ["Ctrl-C"]. Keys: {KEY_NAMES}.',
    )
    expect: str | None = Field(
        None,
        max_length=500,
        description="send: also wait (up to `timeout`) until the screen matches this regular expression.",
    )
    wait_for: str | None = Field(
        None,
        max_length=4096,
        description="wait: instead of waiting for the exit, wait until something under this path changes.",
    )
    rows: int | None = Field(None, ge=1, le=500, description="resize: the terminal's new height.")
    cols: int | None = Field(None, ge=1, le=1000, description="resize: the terminal's new width.")


@tool("process", toolset="terminal", parallel_safe=True)
def process(ctx: ToolContext, args: ProcessArgs) -> ToolResult:
    """Inspect and control background processes started with terminal(background=true)."""
    sandbox = ctx.sandbox
    if args.action == "list":
        procs = [*sandbox.runtime.proc_list()["processes"], *sandbox.terminals.list()]
        lines = [f"{p['id']}  {_state(p)}  {p['command']}" for p in procs]
        return ToolResult("\n".join(lines) or "no background processes")
    if args.action == "wait" and args.wait_for is not None:
        return after_change(ctx, args.wait_for, args.timeout, lambda: ToolResult(f"watching {args.wait_for}"))
    if args.id is None:
        return ToolResult(f"error: process {args.action} needs the process id", ok=False)
    if is_terminal_id(args.id):
        return drive_terminal(
            ctx, args.action, args.id, args.keys, args.data, args.rows, args.cols, args.timeout, args.expect
        )
    if args.action in ("send", "resize"):
        return ToolResult(
            f"error: {args.action} is for interactive terminals (terminal(interactive=true)); "
            "a background process takes `write`",
            ok=False,
        )
    runtime, proc_id = sandbox.runtime, args.id
    if args.action == "log":
        log = runtime.proc_log(id=proc_id, offset=args.offset)
        return ToolResult(f"{log['text']}\n[{_state(log)}; next offset {log['offset']}]")
    if args.action == "write":
        runtime.proc_write(id=proc_id, data=args.data)
        return ToolResult(f"wrote {len(args.data)} characters")
    if args.action == "kill":
        status = runtime.proc_kill(id=proc_id)
    elif args.action == "wait":
        status = runtime.proc_wait(id=proc_id, timeout=args.timeout, call_timeout=args.timeout + 10)
    else:
        status = runtime.proc_poll(id=proc_id)
    return ToolResult(
        f"process {args.id} ({status['command']}): {_state(status)}; {status['log_bytes']} bytes of output"
    )


def _start(ctx: ToolContext, args: TerminalArgs, first_output: float) -> ToolResult:
    """Start an interactive terminal (its first screen) or a background process (its id)."""
    if args.interactive:
        return open_terminal(ctx, args.command, min(first_output, ctx.limits.max_tool_timeout))
    started = ctx.sandbox.runtime.proc_spawn(command=args.command)
    return ToolResult(f"started background process {started['id']} (pid {started['pid']})")


def _state(status: Mapping[str, Any]) -> str:
    return "running" if status["running"] else f"exited with code {status['exit_code']}"
