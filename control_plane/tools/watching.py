"""`wait_for` on the terminal and process tools: wait until something changes under a path in the sandbox."""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable

from backends.errors import RuntimeCallError
from backends.watch import FileEvent, Watch
from sandboxes.protocol import NOT_FOUND

from .registry import ToolContext, ToolResult

SHOWN = 20


def _watch(ctx: ToolContext, path: str) -> tuple[Watch, str | None]:
    """A watch on `path`; for a path that does not exist yet, on its parent (not recursively) and the
    absolute path to look for there. Raises RuntimeCallError."""
    try:
        return ctx.sandbox.watch(path), None
    except RuntimeCallError as exc:
        if exc.code != NOT_FOUND:
            raise
        trimmed = path.rstrip("/") or "/"
        watch = ctx.sandbox.watch(posixpath.dirname(trimmed) or ".", recursive=False)
        return watch, posixpath.join(watch.path, posixpath.basename(trimmed))


def _under(event: FileEvent, target: str | None) -> bool:
    if target is None or event.kind == "overflow":
        return True
    return any(p == target or p.startswith(target + "/") for p in (event.path, event.source) if p)


def after_change(ctx: ToolContext, path: str, timeout: float, start: Callable[[], ToolResult]) -> ToolResult:
    """Watch `path`, run `start`, then wait up to `timeout` seconds for the first change under it; the
    result of `start` with the changes seen (the watch exists before `start`: nothing is missed)."""
    try:
        watch, target = _watch(ctx, path)
    except RuntimeCallError as exc:
        return ToolResult(f"error: cannot watch {path}: {exc.message}", ok=False)
    with watch:
        started = start()
        if not started.ok:
            return started
        deadline = time.monotonic() + timeout
        events: list[FileEvent] = []
        while not events and (event := watch.get(max(0.0, deadline - time.monotonic()))) is not None:
            events = [e for e in [event, *watch.drain()] if _under(e, target)]
    if not events:
        note = f"\n[no change under {path} within {timeout:g} s]"
        return ToolResult(started.content + note, ok=False, exit_code=started.exit_code)
    lines = [event.describe() for event in events[:SHOWN]]
    if len(events) > SHOWN:
        lines.append(f"... and {len(events) - SHOWN} more")
    note = f"\n[changed under {path}:\n" + "\n".join(lines) + "]"
    return ToolResult(started.content + note, ok=True, exit_code=started.exit_code)
