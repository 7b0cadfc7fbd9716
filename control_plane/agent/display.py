"""How a tool call reads in one line, wherever a surface shows it (the terminal, a chat's progress lines)."""

from __future__ import annotations

import json

ARG_PREVIEW = 100


def describe_call(name: str, arguments: dict[str, object] | str) -> str:
    """One line for a tool call: its main argument, shortened."""
    if isinstance(arguments, str):
        text = arguments
    elif len(arguments) == 1 or "command" in arguments or "path" in arguments:
        main = arguments.get("command", arguments.get("path", next(iter(arguments.values()), "")))
        text = str(main)
    else:
        text = json.dumps(arguments, ensure_ascii=False)
    text = " ".join(text.split())
    return f"{name} {text[:ARG_PREVIEW]}{'…' if len(text) > ARG_PREVIEW else ''}"
