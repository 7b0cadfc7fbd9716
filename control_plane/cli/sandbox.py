"""`hermetic sandbox ...`: use a sandbox directly from the terminal."""

from __future__ import annotations

import shlex
import sys
import time
from typing import Annotated

import typer
from rich.console import Console

from backends import BACKEND_NAMES, Backend, BackendUnavailable, Sandbox, SandboxSpec
from backends.snapshots import SnapshotError

from ..config.settings import Settings, load_settings
from ..sandbox_manager import choose_backend, snapshot_store

app = typer.Typer(help="Open sandboxes and run commands in them.", no_args_is_help=True)
console = Console(stderr=True, highlight=False)
TRUNCATION = "\n\n[... output truncated"

BackendOption = Annotated[
    str | None,
    typer.Option(
        "--backend",
        "-b",
        help=f"{', '.join(BACKEND_NAMES[:-1])} or {BACKEND_NAMES[-1]} (default: docker if running)",
    ),
]


FromSnapshotOption = Annotated[
    str | None, typer.Option("--from-snapshot", help="Start from this snapshot (hermetic snapshot list)")
]
SaveOption = Annotated[
    str | None, typer.Option("--snapshot", help="Snapshot the sandbox at the end, with this label")
]


def open_backend(name: str | None, settings: Settings) -> Backend:
    """The named backend (else the configured one), or docker when dockerd answers and local otherwise."""
    try:
        backend, notice = choose_backend(settings, name)
    except BackendUnavailable as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    if notice:
        console.print(f"[yellow]{notice}[/]")
    backend.snapshots = snapshot_store(settings)
    return backend


NetworkOption = Annotated[
    str | None, typer.Option(help="none, allowlist (sandbox.allow and --allow) or full")
]
AllowOption = Annotated[
    list[str] | None, typer.Option("--allow", help="A host, *.wildcard, host:PORT, CIDR or @preset (repeat)")
]


def _spec(
    settings: Settings, network: str | None, allow: list[str] | None = None, from_snapshot: str | None = None
) -> SandboxSpec:
    """The configured spec with the command line's choices (validated: a bad allow rule exits 2)."""
    spec = settings.sandbox.spec
    update: dict[str, object] = {"network": network} if network else {}
    if allow:
        update["allow"] = [*spec.allow, *allow]
    if from_snapshot:
        update["from_snapshot"] = from_snapshot
    try:
        return SandboxSpec.model_validate({**spec.model_dump(), **update})
    except ValueError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from None


def _create(backend: Backend, spec: SandboxSpec) -> Sandbox:
    try:
        return backend.create(spec)
    except SnapshotError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc


def _save(sandbox: Sandbox, label: str | None) -> None:
    if label is not None:
        snapshot = sandbox.snapshot(label=label or None)
        console.print(f"snapshot {snapshot.id}: hermetic sandbox shell --from-snapshot {snapshot.id}")


def run_streaming(sandbox: Sandbox, command: str, timeout: float) -> tuple[int, str]:
    """Run one command, printing output as it arrives; returns its exit code (124 on timeout) and cwd."""
    result = sandbox.run(command, timeout=timeout, on_output=lambda text: print(text, end="", flush=True))
    if result["truncated"]:
        print(result["output"][result["output"].find(TRUNCATION) :], end="")
    for notice in sandbox.pop_notices():
        console.print(f"[yellow]notice: {notice}[/]")
    for refused in sandbox.egress.take_denials() if sandbox.egress is not None else []:
        console.print(f"[yellow]{refused}[/]", markup=False)
    if result["timed_out"]:
        console.print(
            f"[yellow]timed out after {timeout:g} s; the command was killed, the session lives on[/]"
        )
        return 124, str(result.get("cwd", ""))
    return int(result["exit_code"]), str(result.get("cwd", ""))


@app.command("exec")
def exec_command(
    command: Annotated[list[str], typer.Argument(help="The command and its arguments (after --)")],
    backend: BackendOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds before the command is killed")] = 600.0,
    network: NetworkOption = None,
    allow: AllowOption = None,
    from_snapshot: FromSnapshotOption = None,
    snapshot: SaveOption = None,
) -> None:
    """Run one command in a fresh sandbox; its exit code becomes ours."""
    settings = load_settings()
    with _create(open_backend(backend, settings), _spec(settings, network, allow, from_snapshot)) as sandbox:
        code, _ = run_streaming(sandbox, shlex.join(command), timeout)
        _save(sandbox, snapshot)
    raise typer.Exit(code)


@app.command("shell")
def shell_command(
    backend: BackendOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds before each command is killed")] = 600.0,
    network: NetworkOption = None,
    allow: AllowOption = None,
    from_snapshot: FromSnapshotOption = None,
    snapshot: SaveOption = None,
) -> None:
    """A persistent shell session in a fresh sandbox. From a pipe, runs each line read, in order."""
    settings = load_settings()
    code = 0
    with _create(open_backend(backend, settings), _spec(settings, network, allow, from_snapshot)) as sandbox:
        if not sys.stdin.isatty():
            for line in sys.stdin:
                if line.strip():
                    code, _ = run_streaming(sandbox, line.rstrip("\n"), timeout)
            _save(sandbox, snapshot)
            raise typer.Exit(code)
        console.print(f"[bold]sandbox {sandbox.id}[/] ({sandbox.backend}); Ctrl-D leaves, Ctrl-C interrupts")
        cwd = sandbox.spec.workdir
        while True:
            try:
                line = console.input(f"[green]sandbox[/]:[blue]{cwd}[/]$ ")
            except EOFError:
                break
            except KeyboardInterrupt:
                console.print()
                continue
            if not line.strip():
                continue
            try:
                code, cwd = run_streaming(sandbox, line, timeout)
            except KeyboardInterrupt:
                sandbox.runtime.shell_interrupt(session="default")
                console.print("[yellow]interrupted[/]")
        _save(sandbox, snapshot)
    raise typer.Exit(code)


@app.command("demo")
def demo(backend: BackendOption = None) -> None:
    """Open a sandbox and show what it does: persistence, a timeout that kills only the command, files."""
    settings = load_settings()
    chosen = open_backend(backend, settings)
    started = time.perf_counter()
    with chosen.create(settings.sandbox.spec) as sandbox:
        console.print(
            f"[bold]1. Opened a {chosen.name} sandbox[/] {sandbox.id} in "
            f"{time.perf_counter() - started:.2f} s (network: {sandbox.spec.network})"
        )
        steps = [
            (
                "2. One persistent shell: cwd, env and functions survive between runs",
                'cd /tmp && export GREETING=hello && greet() { echo "$GREETING, $1 (from $PWD)"; }',
            ),
            (None, "greet world"),
            (
                "3. Who am I, and can I reach the network?",
                "id; (curl -sS -m 3 http://example.com >/dev/null && echo online) 2>&1 | tail -1",
            ),
        ]
        for title, command in steps:
            if title:
                console.print(f"[bold]{title}[/]")
            _show(sandbox, command, 30)
        console.print("[bold]4. A timeout kills only the command; the session lives on[/]")
        _show(sandbox, "sleep 30; echo never printed", 1)
        _show(sandbox, "greet again", 30)
        console.print("[bold]5. Files without the shell: atomic write, paged read, patch[/]")
        sandbox.runtime.fs_write(path="notes/hello.txt", content="line one\nline two\n")
        sandbox.runtime.fs_patch(path="notes/hello.txt", old="two", new="2")
        console.print(sandbox.runtime.fs_read(path="notes/hello.txt")["content"], markup=False)
        ping = []
        for _ in range(200):
            t = time.perf_counter()
            sandbox.run("true")
            ping.append(time.perf_counter() - t)
        ping.sort()
        console.print(f"[bold]6. Round trip of `true`:[/] median {ping[100] * 1000:.2f} ms over 200 runs")
    console.print("[bold]Sandbox closed and removed.[/]")


def _show(sandbox: Sandbox, command: str, timeout: float) -> None:
    console.print(f"  [dim]$ {command}[/]", markup=True, highlight=False)
    result = sandbox.run(command, timeout=timeout)
    for line in result["output"].rstrip("\n").splitlines():
        console.print(f"    {line}", markup=False)
    state = "timed out, killed" if result["timed_out"] else f"exit {result['exit_code']}"
    console.print(f"    [dim]-> {state}, cwd {result.get('cwd')}[/]")
