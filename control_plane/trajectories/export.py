"""Export: the selected sessions, redacted, filtered, written one per line in the chosen format."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TextIO

from ..store import Store
from .formats import FORMATS, markdown
from .quality import Quality
from .reader import Selection, Trajectory, read


def redacted(t: Trajectory, redact: Callable[[str], str]) -> Trajectory:
    """The trajectory with every text the model or a tool wrote passed through `redact` (arguments too)."""
    messages: list[dict[str, Any]] = []
    for message in t.messages:
        copy = dict(message)
        for text in ("content", "reasoning_content"):
            if copy.get(text):
                copy[text] = redact(copy[text])
        if copy.get("tool_calls"):
            copy["tool_calls"] = [
                {
                    **call,
                    "function": {
                        **call["function"],
                        "arguments": redact(call["function"].get("arguments", "")),
                    },
                }
                for call in copy["tool_calls"]
            ]
        messages.append(copy)
    return replace(t, messages=messages)


def export(
    store: Store,
    profile: str,
    selection: Selection,
    fmt: str,
    out: TextIO,
    quality: Quality,
    redact: Callable[[str], str],
    tools: dict[str, Any],
) -> int:
    """Write the trajectories that pass `quality` to `out` (JSON lines, or Markdown for 'md'); how many."""
    if fmt != "md" and fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: one of {', '.join([*FORMATS, 'md'])}")
    written = 0
    for trajectory in read(store, profile, selection):
        clean = redacted(trajectory, redact)
        if not quality.keep(clean):
            continue
        if fmt == "md":
            out.write(markdown(clean) + "\n---\n\n")
        else:
            out.write(json.dumps(FORMATS[fmt](clean, tools), ensure_ascii=False) + "\n")
        written += 1
    return written
