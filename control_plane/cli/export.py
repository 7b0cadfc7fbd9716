"""`hermetic sessions export`: the profile's sessions as training trajectories (JSON lines) or Markdown."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, TextIO

import typer
from rich.console import Console

from ..agent.base import known_secrets
from ..config.settings import load_settings
from ..safety.redaction import Redactor
from ..store import Store
from ..tools import TOOLS
from ..trajectories import REASONS, Quality, Selection, export, parse_since
from ..trajectories.quality import DEFAULT_CHECKS

err = Console(stderr=True, highlight=False)


@contextlib.contextmanager
def _output(path: Path | None) -> Iterator[TextIO]:
    if path is None:
        yield sys.stdout
        return
    with path.open("w", encoding="utf-8") as out:
        yield out


def export_sessions(
    ids: Annotated[list[str] | None, typer.Argument(help="Session ids (default: every session)")] = None,
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="sharegpt, chatml, openai, rl (with rewards) or md")
    ] = "sharegpt",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write here instead of standard output")
    ] = None,
    since: Annotated[str | None, typer.Option(help="Created since: 7d, 12h, or an ISO date")] = None,
    source: Annotated[
        list[str] | None, typer.Option(help="Only sessions from this source: cli, api, cron...")
    ] = None,
    min_tool_calls: Annotated[int, typer.Option(help="Drop trajectories with fewer tool calls")] = 0,
    min_reward: Annotated[
        float | None, typer.Option(help="Only evaluation attempts whose verifier gave at least this reward")
    ] = None,
    only_success: Annotated[bool, typer.Option(help="Drop trajectories with a failed tool call")] = False,
    keep: Annotated[
        list[str] | None, typer.Option(help=f"Turn a default filter off: {', '.join(sorted(DEFAULT_CHECKS))}")
    ] = None,
) -> None:
    """Export sessions as training data, secrets redacted; what each filter dropped goes to standard error."""
    settings = load_settings()
    unknown = set(keep or []) - DEFAULT_CHECKS
    if unknown:
        err.print(f"[red]--keep: unknown filter(s) {', '.join(sorted(unknown))}[/]")
        raise typer.Exit(2)
    try:
        selection = Selection(ids or (), parse_since(since) if since else None, source or (), min_reward)
    except ValueError as exc:
        err.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    every_tool = TOOLS.select(sorted(TOOLS.toolsets))
    quality = Quality(
        known_tools=set(every_tool),
        max_iterations=settings.limits.max_iterations,
        checks=set(DEFAULT_CHECKS) - set(keep or []),
        min_tool_calls=min_tool_calls,
        only_success=only_success,
    )
    tools = {
        name: tool.schema() for toolset in TOOLS.toolsets for name, tool in TOOLS.select([toolset]).items()
    }
    with Store(str(settings.database_url)) as store, _output(out) as stream:
        try:
            written = export(
                store,
                settings.profile,
                selection,
                fmt,
                stream,
                quality,
                Redactor(known_secrets(settings)),
                tools,
            )
        except ValueError as exc:
            err.print(f"[red]{exc}[/]")
            raise typer.Exit(2) from None
    report = quality.report()
    dropped = ", ".join(f"{REASONS[name]}: {count}" for name, count in report.items() if name != "kept")
    err.print(f"exported {written} trajectories" + (f"; dropped {dropped}" if dropped else ""))
