"""`hermetic a2a call URL TASK`: give a task to another agent over A2A and follow it to its end."""

from __future__ import annotations

import asyncio
import signal
from typing import Annotated
from urllib.parse import urlsplit

import typer

app = typer.Typer(help="Talk to other agents over A2A (Agent2Agent): see docs/a2a.md.", no_args_is_help=True)
INPUT_REQUIRED = 3
"""The exit status when the task waits for an answer (send it with --task and --context)."""
INTERRUPTED = 130
"""The exit status after Ctrl-C (SIGINT) stopped the call and canceled the task, as a shell's."""


@app.command("call")
def call(
    url: Annotated[
        str, typer.Argument(help="The agent's base URL (its card is at /.well-known/agent-card.json)")
    ],
    task: Annotated[str, typer.Argument(help="What to ask it, or the answer to its question (with --task)")],
    token: Annotated[
        str | None,
        typer.Option(envvar="HERMETIC_A2A_TOKEN", help="Its bearer token (e.g. a Hermetic API token)"),
    ] = None,
    context: Annotated[str, typer.Option(help="Continue this context (the same session over there)")] = "",
    task_id: Annotated[str, typer.Option("--task", help="Answer this task's question")] = "",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines, only the answer")] = False,
) -> None:
    """Send TASK, print the agent's progress (stderr) and its answer (stdout). Exit 0 when the task
    completes, 3 when it waits for an answer, 1 when it fails, is canceled or is refused; Ctrl-C
    cancels the task (exit 130)."""
    from ..tools.a2a_client import RemoteAgentError, RemoteOutcome, call_agent

    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise typer.BadParameter("an http:// or https:// URL", param_hint="URL")

    def progress(line: str) -> None:
        if not quiet:
            typer.secho(f"  {line.splitlines()[0] if line.strip() else line}", err=True, dim=True)

    async def until_interrupted() -> RemoteOutcome:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, stop.set)
        try:
            return await call_agent(
                url, task, token=token, context_id=context, task_id=task_id, on_progress=progress, stop=stop
            )
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    try:
        outcome = asyncio.run(until_interrupted())
    except RemoteAgentError as exc:
        typer.echo(f"hermetic a2a call: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(outcome.message)
    typer.echo(f"task {outcome.task_id} (context {outcome.context_id}): {outcome.state}", err=True)
    if outcome.stopped:
        typer.echo("interrupted: the task was canceled", err=True)
        raise typer.Exit(INTERRUPTED)
    if outcome.state == "input_required":
        typer.echo(
            f"answer: hermetic a2a call {url} ANSWER --task {outcome.task_id} --context {outcome.context_id}",
            err=True,
        )
        raise typer.Exit(INPUT_REQUIRED)
    if outcome.state != "completed":
        raise typer.Exit(1)
