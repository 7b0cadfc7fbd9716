"""`hermetic doctor`: what this machine has for Hermetic, what is missing, and the command that fixes it."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..config.settings import load_settings
from ..doctor import run_checks

STYLE = {"ok": "green", "warn": "yellow", "fail": "red", "skip": "dim"}


def doctor(
    offline: Annotated[bool, typer.Option(help="Do not call the model")] = False,
) -> None:
    """Check what Hermetic needs here (dockerd, images, bubblewrap, Chromium, sshd, database, model)."""
    rows = run_checks(load_settings(), offline=offline)
    table = Table("check", "status", "detail", "fix", show_lines=False)
    for row in rows:
        table.add_row(row.name, f"[{STYLE[row.status]}]{row.status}[/]", row.detail, row.fix or "")
    Console(width=200).print(table)
    if any(row.status == "fail" for row in rows):
        raise typer.Exit(1)
