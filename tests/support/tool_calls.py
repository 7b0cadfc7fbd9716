"""A tool called directly on a sandbox, as the agent's registry calls it."""

from __future__ import annotations

import json
import threading
from typing import Any

from backends import Sandbox
from control_plane.config.settings import Limits
from control_plane.tools import TOOLS, ToolContext, ToolResult, invoke


def call(sandbox: Sandbox | None, name: str, arguments: Any, progress: list[str] | None = None) -> ToolResult:
    progress = [] if progress is None else progress

    def no_sandbox() -> Sandbox:
        raise AssertionError("this call must not need a sandbox")

    ctx = ToolContext(
        session_id="s-test",
        call_id="c1",
        limits=Limits(),
        get_sandbox=(lambda: sandbox) if sandbox else no_sandbox,
        progress=progress.append,
        cancelled=threading.Event(),
    )
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return invoke(TOOLS.get(name), name, raw, ctx)
