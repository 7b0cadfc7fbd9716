"""`hermetic sandbox watch ID PATH`: a sandbox's files as they change, from any process on this host."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from backends.errors import SandboxError
from backends.network import Ingress, net_dir
from backends.watch import watch_from_host

console = Console(highlight=False)


def watch(
    sandbox_id: Annotated[str, typer.Argument(help="The sandbox id (hm-...)")],
    path: Annotated[str, typer.Argument(help="A file or directory in the sandbox (relative: its workspace)")],
    json_lines: Annotated[
        bool, typer.Option("--json", help='JSON lines: {"watching": PATH} once armed, then one per event')
    ] = False,
) -> None:
    """Print create / modify / delete / move events under PATH until Ctrl-C or the path goes away
    (inotify inside the sandbox; a sandbox on this host with bubblewrap or docker)."""
    try:
        resolved, events = watch_from_host(Ingress(sandbox_id, net_dir(sandbox_id)), path)
    except OSError:
        console.print(
            f"[red]no sandbox {escape(sandbox_id)} to watch on this host[/] (only local sandboxes with "
            "bubblewrap and docker sandboxes are reachable from another process; in the API: "
            "GET /sessions/ID/watch)"
        )
        raise typer.Exit(1) from None
    except SandboxError as exc:
        console.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(2) from None
    if json_lines:  # a first line once armed: what changes from now on is printed
        print(json.dumps({"watching": resolved}), flush=True)
    else:
        console.print(f"[dim]watching {escape(resolved)} in {escape(sandbox_id)}; Ctrl-C stops[/]")
    try:
        for event in events:
            if json_lines:
                record = {"kind": event.kind, "path": event.path, "source": event.source, "dir": event.is_dir}
                print(json.dumps({**record, "dropped": event.dropped}), flush=True)
            else:
                stamp = time.strftime("%H:%M:%S")
                console.print(f"{stamp} {escape(event.describe())}")
    except KeyboardInterrupt:
        return
    except (OSError, ValueError, SandboxError) as exc:  # the sandbox ended, or sent nonsense
        console.print(f"[yellow]watch ended: {escape(str(exc))}[/]")
        raise typer.Exit(1) from None


def register(sandbox_app: typer.Typer) -> None:
    sandbox_app.command("watch")(watch)
