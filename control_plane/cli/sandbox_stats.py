"""`hermetic sandbox stats [ID] [--watch]` and `hermetic sandbox list`: what the sandboxes on this host
cost now (local with bubblewrap, docker: reachable from any process through their ingress sockets)."""

from __future__ import annotations

import json
import threading
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from backends.host_stats import reachable, read
from backends.stats import SandboxStats, StatsReader

console = Console(highlight=False)
REFRESH = 2.0


def _size(value: int | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024  # type: ignore[assignment]
    return "-"


def _table(readings: list[SandboxStats | str]) -> Table:
    table = Table(
        "sandbox", "source", "cpu", "cpu s", "memory", "peak", "pids", "disk", "egress up/down", "limits"
    )
    for stats in readings:
        if isinstance(stats, str):
            table.add_row(stats, "[yellow]no answer[/]", *["-"] * 8)  # ended, or an older runtime
            continue
        memory = _size(stats.memory_bytes) + (
            f" / {_size(stats.memory_limit_bytes)}" if stats.memory_limit_bytes else ""
        )
        pids = f"{stats.pids}" + (f" / {stats.pids_limit}" if stats.pids_limit else "")
        hits = ", ".join(
            text
            for count, text in ((stats.oom_kills, "OOM kills"), (stats.pids_max_hits, "forks refused"))
            if count
        )
        table.add_row(
            stats.sandbox_id,
            stats.source,
            "-" if stats.cpu_percent is None else f"{stats.cpu_percent:.1f}%",
            f"{stats.cpu_seconds:.2f}",
            memory,
            _size(stats.memory_peak_bytes),
            pids,
            _size(stats.disk_bytes),
            f"{_size(stats.egress_bytes_up)} / {_size(stats.egress_bytes_down)}",
            hits or "-",
        )
    return table


def _readings(readers: dict[str, StatsReader]) -> list[SandboxStats | str]:
    found: list[SandboxStats | str] = []
    for sandbox_id, reader in readers.items():
        try:
            found.append(read(reader))
        except OSError:
            found.append(sandbox_id)
    return found


def stats(
    sandbox_id: Annotated[
        str | None, typer.Argument(help="A sandbox id (hm-...); default: all on this host")
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", help=f"Refresh every {REFRESH:g} s until Ctrl-C")] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="One JSON object per sandbox (no --watch)")
    ] = False,
) -> None:
    """CPU (percent of one core), memory now and at its peak, pids, workspace disk use, egress bytes and the
    limits hit: from the sandbox's cgroup, its runtime and its audit log."""
    ids = [sandbox_id] if sandbox_id else reachable()
    if not ids:
        console.print("no sandboxes on this host (local with bubblewrap and docker sandboxes are listed)")
        return
    readers = {i: StatsReader(i) for i in ids}
    first = _readings(readers)
    if sandbox_id and isinstance(first[0], str):
        console.print(f"[red]no sandbox {sandbox_id} on this host[/] (local with bubblewrap, docker)")
        raise typer.Exit(1)
    if json_out:
        for stats in first:
            print(
                stats.model_dump_json()
                if isinstance(stats, SandboxStats)
                else json.dumps({"sandbox_id": stats, "answered": False})
            )
        return
    if not watch:
        console.print(_table(first))
        return
    stop = threading.Event()
    with Live(_table(first), console=console, auto_refresh=False) as live:
        try:
            while not stop.wait(REFRESH):  # a screen's refresh, not a wait for an event
                live.update(_table(_readings(readers)), refresh=True)
        except KeyboardInterrupt:
            pass


def list_sandboxes(
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per sandbox")] = False,
) -> None:
    """The sandboxes on this host (local with bubblewrap, docker), each with what it costs now."""
    stats(None, False, json_out)


def register(sandbox_app: typer.Typer) -> None:
    sandbox_app.command("stats")(stats)
    sandbox_app.command("list")(list_sandboxes)
