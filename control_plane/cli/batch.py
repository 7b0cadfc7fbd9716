"""`hermetic batch run`: a file of prompts through the agent in parallel, with progress and a summary."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ..agent.agent import Agent
from ..batch import (
    BatchError,
    BatchResult,
    BatchRunner,
    batch_settings,
    finished_ids,
    read_prompts,
    write_summary,
)
from .agent import BackendOption, ModelOption, agent_settings
from .render import progress_bar

app = typer.Typer(help="Batch runs: many prompts, each its own session and sandbox.", no_args_is_help=True)
err = Console(stderr=True, highlight=False)


@app.command("run")
def run(
    prompts: Annotated[
        Path, typer.Argument(help='JSON lines: {"prompt": ..., "id", "category", "toolsets"}')
    ],
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, max=256, help="Prompts at once")] = 4,
    out: Annotated[
        Path | None, typer.Option(help="Results directory (default: PROMPTS.out beside the file)")
    ] = None,
    resume: Annotated[bool, typer.Option(help="Skip the prompts already completed in --out")] = False,
    timeout: Annotated[float, typer.Option(min=1, help="Seconds one prompt may take")] = 600.0,
    max_iterations: Annotated[int | None, typer.Option(min=1, help="Most model calls per prompt")] = None,
    model: ModelOption = None,
    backend: BackendOption = None,
) -> None:
    """Run every prompt; results.jsonl in --out gets a line as each one ends. Exit 1 if any failed."""
    try:
        items = read_prompts(prompts)
    except BatchError as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(2) from None
    directory = out or prompts.with_name(prompts.stem + ".out")
    directory.mkdir(parents=True, exist_ok=True)
    results = directory / "results.jsonl"
    if results.exists() and results.stat().st_size and not resume:
        err.print(f"[red]{results} already has results: --resume to continue it, or another --out[/]")
        raise typer.Exit(2)
    done = finished_ids(results) if resume else set()
    todo = [item for item in items if item.id not in done]
    agent = Agent(batch_settings(agent_settings(model, backend), max_iterations))
    runner = BatchRunner(agent, results, workers=workers, timeout=timeout)
    progress = progress_bar("batch", err)
    task = progress.add_task("batch", total=len(items), completed=len(done), failed=0)
    failed = 0

    def advance(result: BatchResult) -> None:
        nonlocal failed
        failed += result.status != "completed"
        progress.update(task, advance=1, failed=failed)

    try:
        with progress:
            summary = asyncio.run(runner.run(todo, skipped=len(done), on_result=advance))
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted: the results so far are in {results}; --resume continues[/]")
        raise typer.Exit(130) from None
    finally:
        agent.close()
    write_summary(directory / "summary.json", summary)
    statuses = (
        ", ".join(f"{status} {n}" for status, n in sorted(summary.statuses.items())) or "nothing to run"
    )
    err.print(
        f"{summary.completed} completed, {summary.failed} failed ({statuses}); "
        f"{summary.skipped} done before; "
        f"{summary.tool_calls} tool calls, {summary.prompt_tokens + summary.completion_tokens:,} tokens, "
        f"{summary.seconds:.1f}s; results in {results}"
    )
    raise typer.Exit(1 if summary.failed else 0)
