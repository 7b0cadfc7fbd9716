"""`hermetic network presets`, `hermetic sandbox egress ID`: what a sandbox may reach and what it tried."""

from __future__ import annotations

import datetime
import json
import threading
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from backends.network import ExposeError, Ingress, exposures, net_dir, read_audit
from backends.network.presets import PRESETS

app = typer.Typer(help="The sandbox's network: allowlist presets.", no_args_is_help=True)
console = Console(highlight=False)


@app.command("presets")
def presets() -> None:
    """The named allowlists: put `@NAME` in sandbox.allow (or `--allow @NAME`)."""
    table = Table("preset", "hosts (ports 80 and 443)")
    for name, hosts in sorted(PRESETS.items()):
        table.add_row(f"@{name}", ", ".join(hosts))
    console.print(table)


def egress(
    sandbox_id: Annotated[str, typer.Argument(help="The sandbox id (hm-...)")],
    json_lines: Annotated[bool, typer.Option("--json", help="Print the audit log's JSON lines")] = False,
) -> None:
    """Every egress decision for a sandbox: time, host, port, allowed or the rule that denied it, bytes."""
    entries = read_audit(sandbox_id)
    if not entries:
        console.print(
            f"no egress log for {sandbox_id}: it never used the network, or is not on network: allowlist"
        )
        raise typer.Exit(1)
    if json_lines:
        for entry in entries:
            print(json.dumps(entry))
        return
    table = Table("time", "host:port", "decision", "up", "down", "seconds")
    for entry in entries:
        table.add_row(
            datetime.datetime.fromtimestamp(entry["time"]).strftime("%H:%M:%S"),
            f"{entry.get('host')}:{entry.get('port')}",
            _decision(entry),
            str(entry.get("bytes_up", "")),
            str(entry.get("bytes_down", "")),
            f"{entry.get('duration', 0):.3f}",
        )
    Console(width=200, highlight=False).print(table)


def _decision(entry: dict[str, Any]) -> str:
    if entry.get("allowed"):
        return f"[green]allowed[/] {entry.get('address', '')}"
    return f"[red]denied ({entry.get('denied')})[/] {entry.get('reason', '')}"


def expose(
    sandbox_id: Annotated[str, typer.Argument(help="The sandbox id (hm-...)")],
    port: Annotated[int, typer.Argument(help="The port a program inside listens on")],
    host_port: Annotated[int, typer.Option(help="Host port to listen on (0: a free one)")] = 0,
    bind: Annotated[
        str | None, typer.Option(help="Host address (default network.expose_bind: 127.0.0.1; 0.0.0.0: all)")
    ] = None,
) -> None:
    """Make a port inside a running sandbox reachable from this host until Ctrl-C or the sandbox ends."""
    from ..config.settings import load_settings

    ingress = Ingress(sandbox_id, net_dir(sandbox_id))
    try:
        exposure = ingress.expose(port, bind or load_settings().network.expose_bind, host_port)
    except ExposeError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None
    print(exposure.url, flush=True)
    console.print(f"[dim]port {port} of {sandbox_id}; Ctrl-C closes it[/]")
    ended = threading.Event()
    try:
        while not ended.wait(1.0):  # the sandbox's end removes its ingress directory
            if not ingress.dir.exists():
                console.print(f"[yellow]sandbox {sandbox_id} ended[/]")
                break
    except KeyboardInterrupt:
        pass
    finally:
        ingress.unexpose(port)


def exposed(sandbox_id: Annotated[str, typer.Argument(help="The sandbox id (hm-...)")]) -> None:
    """A sandbox's exposed ports (held by any process on this host)."""
    for exposure in exposures(net_dir(sandbox_id)):
        print(f"{exposure.port}\t{exposure.url}\tpid {exposure.pid}")


def register(root: typer.Typer, sandbox_app: typer.Typer) -> None:
    root.add_typer(app, name="network")
    sandbox_app.command("egress")(egress)
    sandbox_app.command("expose")(expose)
    sandbox_app.command("exposed")(exposed)
