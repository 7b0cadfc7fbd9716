"""The terminal and process tools' interactive side: a program on a PTY of its own, its screen rendered."""

from __future__ import annotations

from backends.terminal import KEY_NAMES, Screen, is_terminal_id

from .limits import limits_note
from .network import egress_note
from .registry import ToolContext, ToolResult

__all__ = ["KEY_NAMES", "drive_terminal", "is_terminal_id", "open_terminal"]


def _shown(ctx: ToolContext, screen: Screen, hint: bool = False) -> ToolResult:
    text = screen.render() + egress_note(ctx.sandbox) + limits_note(ctx)
    if hint and screen.running:
        text += (
            f'\n[type into it with process(action="send", id="{screen.id}", keys=["text", "Enter"]); '
            f'stop it with process(action="kill", id="{screen.id}")]'
        )
    return ToolResult(text, ok=screen.running or screen.exit_code == 0, exit_code=screen.exit_code)


def open_terminal(ctx: ToolContext, command: str, timeout: float) -> ToolResult:
    """Start `command` on a new terminal; its screen once the first output settles."""
    _, screen = ctx.sandbox.terminals.open(command, timeout=timeout)
    return _shown(ctx, screen, hint=True)


def drive_terminal(
    ctx: ToolContext,
    action: str,
    tid: str,
    keys: list[str],
    text: str,
    rows: int | None,
    cols: int | None,
    timeout: float,
    expect: str | None,
) -> ToolResult:
    """One process-tool action on an interactive terminal (id t1, t2, ...)."""
    terminals = ctx.sandbox.terminals
    if action == "kill":
        status = terminals.close(tid)
        return ToolResult(f"terminal {tid} ({status['command']}) closed")
    term = terminals.get(tid)
    if action in ("send", "write"):
        if not keys and not text:
            return ToolResult("error: send needs `keys` (or write needs `data`)", ok=False)
        return _shown(ctx, term.send(keys, text, timeout=timeout, expect=expect))
    if action == "resize":
        if rows is None or cols is None:
            return ToolResult("error: resize needs `rows` and `cols`", ok=False)
        return _shown(ctx, term.resize(rows, cols))
    if action == "wait":
        return _shown(ctx, term.wait(timeout))
    return _shown(ctx, term.screen())  # poll, log: the screen as it is now
