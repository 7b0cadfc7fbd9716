"""`hermetic snapshot ...` (list, show, label, rm, prune) and `hermetic sessions checkpoints | rollback |
fork`: snapshots and the agent's checkpoints from the terminal."""

from __future__ import annotations

import datetime
import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from backends import Backend, BackendUnavailable
from backends.snapshots import Snapshot, SnapshotError, SnapshotStore

from ..agent.agent import Agent
from ..checkpoints import Checkpoints, NoSuchCheckpoint
from ..config.settings import Settings, load_settings
from ..sandbox_manager import SandboxManager, choose_backend, snapshot_store
from ..sizes import human_size
from .agent import sessions_app
from .listing_json import AsJson, print_json

app = typer.Typer(help="Saved sandbox states: list, show, label, delete, prune.", no_args_is_help=True)
console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


def _when(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _store() -> tuple[Settings, SnapshotStore]:
    settings = load_settings()
    return settings, snapshot_store(settings)


def _backend_for(settings: Settings, store: SnapshotStore, family: str) -> Backend:
    """The backend a snapshot belongs to, using this profile's registry; exits with the fix if unavailable."""
    try:
        backend, _ = choose_backend(settings, family)
    except BackendUnavailable as exc:
        err.print(f"[red]the {family} backend, which holds this snapshot's copy, is unavailable: {exc}[/]")
        raise typer.Exit(2) from exc
    backend.snapshots = store
    return backend


def _get(store: SnapshotStore, snapshot_id: str) -> Snapshot:
    try:
        return store.get(snapshot_id)
    except SnapshotError as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(2) from exc


def snapshot_table(snapshots: list[Snapshot]) -> Table:
    table = Table(box=None)
    table.add_column("id", no_wrap=True, min_width=17)  # whole: it is what people copy
    for column in ("backend", "created", "size", "label", "owner", "from"):
        table.add_column(column)
    for s in snapshots:
        table.add_row(
            s.id,
            s.backend,
            _when(s.created),
            human_size(s.bytes),
            escape(s.label or ""),
            s.owner or "",
            s.source,
        )
    return table


@app.command("list")
def list_command(
    owner: Annotated[str | None, typer.Option(help="Only this owner's (a session id)")] = None,
    as_json: AsJson = False,
) -> None:
    """This profile's snapshots, oldest first, with the disk they use."""
    _, store = _store()
    snapshots = store.list(owner=owner)
    if as_json:
        print_json(snapshot.summary() for snapshot in snapshots)
        return
    console.print(snapshot_table(snapshots))
    damaged = store.damaged()
    console.print(
        f"{len(snapshots)} snapshots, {human_size(sum(s.bytes for s in snapshots))}"
        + (
            f"; {len(damaged)} damaged records (hermetic snapshot rm ID): {', '.join(damaged)}"
            if damaged
            else ""
        )
    )


@app.command("show")
def show(snapshot_id: str) -> None:
    """What a snapshot holds, where its copy is, and what it does not keep."""
    _, store = _store()
    print(json.dumps(_get(store, snapshot_id).summary(), indent=2))


@app.command("label")
def label(
    snapshot_id: str, text: Annotated[str, typer.Argument(help="The new label; an empty string clears it")]
) -> None:
    """Give a snapshot a label (shown in listings)."""
    _, store = _store()
    _get(store, snapshot_id)
    store.relabel(snapshot_id, text or None)


@app.command("rm")
def remove(snapshot_ids: Annotated[list[str], typer.Argument(help="Snapshot ids")]) -> None:
    """Delete snapshots: their copies, then their records."""
    settings, store = _store()
    code = 0
    for snapshot_id in snapshot_ids:
        try:
            family = store.get(snapshot_id).backend
        except SnapshotError as exc:
            if snapshot_id not in store.damaged():
                err.print(f"[red]{escape(str(exc))}[/]")
                code = 2
                continue
            store.forget(snapshot_id)  # damaged: nothing readable says where a copy is
            console.print(f"removed the damaged record of {snapshot_id}")
            continue
        _backend_for(settings, store, family).delete_snapshot(snapshot_id)
        console.print(f"deleted {snapshot_id}")
    raise typer.Exit(code)


@app.command("prune")
def prune() -> None:
    """Apply the retention settings (snapshots.keep per owner, snapshots.max_age_days) now."""
    settings, store = _store()
    for family in sorted({s.backend for s in store.list()}):
        removed = _backend_for(settings, store, family).prune_snapshots(
            settings.snapshots.keep, settings.snapshots.max_age
        )
        console.print(f"{family}: deleted {len(removed)} {' '.join(removed)}".rstrip())


# -- the agent's checkpoints, under `hermetic sessions` ----------------------------------------------


def _checkpoints() -> tuple[Settings, Checkpoints]:
    settings = load_settings()
    return settings, Checkpoints(SandboxManager(settings), settings.snapshots)


@sessions_app.command("checkpoints")
def checkpoints_list(session_id: str) -> None:
    """A session's checkpoints, taken before its writing tool calls."""
    _, checkpoints = _checkpoints()
    table = Table("n", "taken", "before", "size", box=None)
    table.add_column("snapshot", no_wrap=True, min_width=17)
    for c in checkpoints.list(session_id):
        table.add_row(c.meta["n"], _when(c.created), c.meta.get("tool", ""), human_size(c.bytes), c.id)
    console.print(table)


@sessions_app.command("rollback")
def rollback(session_id: str, n: Annotated[int, typer.Argument(help="Checkpoint number")]) -> None:
    """Restore a session's sandbox to checkpoint N when the session next runs; the agent is told."""
    _, checkpoints = _checkpoints()
    try:
        checkpoints.rollback(session_id, n)
    except (NoSuchCheckpoint, SnapshotError) as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(2) from exc
    console.print(f"session {session_id} resumes from checkpoint {n}: hermetic chat --resume {session_id}")


@sessions_app.command("fork")
def fork(session_id: str) -> None:
    """A new session with a copy of this one's history and of its sandbox (its latest checkpoint)."""
    settings = load_settings()
    agent = Agent(settings)
    try:
        forked = agent.fork_session(session_id)
    except KeyError:
        err.print(f"[red]no session {session_id} in profile {settings.profile}[/] (hermetic sessions list)")
        raise typer.Exit(2) from None
    finally:
        agent.close()
    for notice in forked.notices:
        console.print(notice)
    console.print(f"new session {forked.id}: hermetic chat --resume {forked.id}")
