"""The CLI reference: every command of the typer app with its arguments and options, as `--help` says
them (each parameter's own help record, so the page and the terminal never disagree)."""

from __future__ import annotations

from typing import Any

import typer
import typer.main

from control_plane.cli.main import app
from refgen import cell


def cli_reference() -> str:
    root = typer.main.get_command(app)
    return "\n\n".join(_command(root, typer.Context(root, info_name="hermetic"), "hermetic")) + "\n"


def _command(cmd: Any, ctx: typer.Context, path: str) -> list[str]:
    parts = [f"{'#' * min(path.count(' ') + 2, 4)} `{path}`"]
    if cmd.help:
        parts.append(cmd.help.replace("\b\n", "").strip())
    parts.append(f"```\n{path} {' '.join(cmd.collect_usage_pieces(ctx))}\n```")
    records = [p.get_help_record(ctx) for p in cmd.params if not getattr(p, "hidden", False)]
    if records := [r for r in records if r is not None]:
        rows = ["| argument or option | help |", "|---|---|"]
        rows += [f"| `{cell(name)}` | {cell(text)} |" for name, text in records]
        parts.append("\n".join(rows))
    out = ["\n\n".join(parts)]
    if hasattr(cmd, "list_commands"):  # a group: its commands, in name order
        for name in sorted(cmd.list_commands(ctx)):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                out += _command(sub, typer.Context(sub, parent=ctx, info_name=name), f"{path} {name}")
    return out
