"""`hermetic eval run|compare`: a suite of verifiable tasks through an agent, with progress, a summary
table, and a paired comparison of two runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from backends import BackendUnavailable

from ..config.settings import load_settings
from ..evals import (
    AttemptResult,
    ResultsFile,
    RunError,
    RunRecord,
    Summary,
    compare,
    open_run,
    record_for_resume,
)
from ..evals.metrics import Score
from ..tools import TOOLS
from .render import progress_bar

app = typer.Typer(
    help="Evaluation on verifiable tasks (Terminal-Bench 2 / Harbor layout).", no_args_is_help=True
)
err = Console(stderr=True, highlight=False)
out = Console(highlight=False)


@app.command("run")
def run(
    suite: Annotated[
        str | None, typer.Argument(help="Suite: tasks directory, one task, git URL, TAP/NAME, or `builtin`")
    ] = None,
    agent: Annotated[
        str, typer.Option(help="hermetic (the agent loop), oracle (the task's solve.sh), nop (does nothing)")
    ] = "hermetic",
    model: Annotated[str | None, typer.Option("--model", "-m", help="hermetic: litellm model id")] = None,
    learning: Annotated[
        str, typer.Option(help="hermetic: off (fresh per attempt), on (learns across the run), frozen")
    ] = "off",
    into_profile: Annotated[
        bool,
        typer.Option(
            "--into-profile", help="hermetic, --learning on: learn in the profile's own memory and skills"
        ),
    ] = False,
    toolsets: Annotated[
        str | None, typer.Option(help="hermetic: comma-separated tool groups (default: the profile's)")
    ] = None,
    max_iterations: Annotated[
        int | None, typer.Option(min=1, help="hermetic: most model calls per attempt")
    ] = None,
    attempts: Annotated[int, typer.Option("--attempts", "-k", min=1, max=100, help="Attempts per task")] = 1,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, max=64, help="Attempts at once")] = 4,
    backend: Annotated[
        str, typer.Option(help="Where attempts run (docker builds the tasks' images)")
    ] = "docker",
    out_dir: Annotated[Path | None, typer.Option("--out", help="Results directory")] = None,
    resume: Annotated[
        Path | None, typer.Option(help="Continue the run in this directory (its run.json says what)")
    ] = None,
    include: Annotated[list[str] | None, typer.Option(help="Only task ids matching this glob")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Leave out task ids matching this glob")] = None,
    tag: Annotated[list[str] | None, typer.Option(help="Only tasks with this tag")] = None,
    network: Annotated[
        str, typer.Option(help="`full` lets allow_internet tasks without an allow list out")
    ] = "policy",
) -> None:
    """Run every task K times, each attempt in a fresh sandbox; exit 1 if any attempt did not pass."""
    try:
        if resume is not None:
            record, directory = record_for_resume(resume), resume
        else:
            if suite is None or out_dir is None:
                raise RunError("give a SUITE and --out DIR (or --resume DIR)")
            if agent not in ("hermetic", "oracle", "nop"):
                raise RunError(f"unknown agent {agent!r}: choose hermetic, oracle or nop")
            if learning not in ("off", "on", "frozen"):
                raise RunError(f"unknown learning mode {learning!r}: choose off, on or frozen")
            chosen = [t.strip() for t in toolsets.split(",") if t.strip()] if toolsets is not None else None
            unknown = set(chosen or []) - TOOLS.toolsets
            if unknown:
                raise RunError(f"--toolsets: unknown tool group(s) {', '.join(sorted(unknown))}")
            if network not in ("policy", "full"):
                raise RunError("--network is `policy` (the task's own) or `full`")
            record = RunRecord(
                suite=suite,
                agent=agent,  # type: ignore[arg-type]
                attempts=attempts,
                backend=backend,
                include=include or [],
                exclude=exclude or [],
                tags=tag or [],
                network_full=network == "full",
                model=model,
                learning=learning,  # type: ignore[arg-type]
                profile=os.environ.get("HERMETIC_PROFILE"),
                into_profile=into_profile,
                toolsets=chosen,
                max_iterations=max_iterations,
            )
            directory = out_dir
        limit = load_settings().limits.max_sandboxes  # the profile's bound on sandboxes at once
        if workers > limit:
            raise RunError(
                f"--workers {workers}: this profile allows {limit} sandboxes at once (limits.max_sandboxes)"
            )
        evaluation = open_run(record, directory, resume=resume is not None, workers=workers)
    except (RunError, BackendUnavailable) as exc:
        err.print(f"[red]{escape(str(exc))}[/]")
        raise typer.Exit(2) from None
    for problem in evaluation.suite.errors:
        err.print(f"[yellow]skipped {escape(str(problem))}[/]")
    runner = evaluation.runner
    total = len(evaluation.suite.tasks) * record.attempts
    progress = progress_bar("eval", err)
    pending = len(runner.pending(evaluation.suite.tasks))
    bar = progress.add_task("eval", total=total, completed=total - pending, failed=0)
    failed = 0

    def advance(result: AttemptResult) -> None:
        nonlocal failed
        failed += not result.passed
        progress.update(bar, advance=1, failed=failed)

    try:
        with progress:
            runner.run(evaluation.suite.tasks, on_result=advance)
    except KeyboardInterrupt:
        err.print(
            f"[yellow]interrupted: finished attempts are in {directory}; --resume {directory} continues[/]"
        )
        raise typer.Exit(130) from None
    summary = evaluation.summary()
    print_summary(summary)
    err.print(f"results in {directory / 'results.jsonl'}, summary in {directory / 'summary.json'}")
    everything = summary.overall.attempts + summary.overall.infrastructure_failures
    raise typer.Exit(0 if summary.overall.passed == everything and not summary.unreadable_tasks else 1)


def print_summary(summary: Summary) -> None:
    at_k = [f"pass@{summary.k}"] if summary.k > 1 else []
    table = Table(title="per task, per tag, overall (infra: failures of the task or machine, not scored)")
    for column in ("task", "attempts", "passed", "pass@1", *at_k, "reward", "infra", "errors"):
        table.add_column(column, justify="left" if column in ("task", "errors") else "right", overflow="fold")

    def row(name: str, score: Score, style: str | None = None) -> None:
        errors = ", ".join(f"{k} {v}" for k, v in sorted(score.errors.items()))
        table.add_row(
            escape(name),
            str(score.attempts),
            str(score.passed),
            f"{score.pass_at_1:.3f}",
            *([f"{score.pass_at_k:.3f}"] if at_k else []),
            f"{score.mean_reward:.3f}",
            str(score.infrastructure_failures),
            escape(errors),
            style=style,
        )

    for name, score in summary.per_task.items():
        row(name, score)
    table.add_section()
    for tag, score in summary.per_tag.items():
        row(f"tag:{tag}", score, "dim")
    table.add_section()
    row("overall", summary.overall, "bold")
    out.print(table)
    for task, problem in summary.unreadable_tasks.items():
        out.print(f"[yellow]unreadable: {escape(task)}: {escape(problem)}[/]")


@app.command("compare")
def compare_runs(
    a: Annotated[Path, typer.Argument(help="The baseline run's directory")],
    b: Annotated[Path, typer.Argument(help="The run compared with it")],
) -> None:
    """Mean reward per task, B minus A, with a 95% paired bootstrap interval over tasks."""
    results = []
    for directory in (a, b):
        found = ResultsFile(directory / "results.jsonl").read()
        if not found:
            err.print(f"[red]{escape(str(directory))}: no results.jsonl with results[/]")
            raise typer.Exit(2)
        results.append(found)
    comparison = compare(results[0], results[1])
    table = Table(title=f"{a.name} -> {b.name}")
    for column in ("task", "A", "B", "B-A"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for delta in comparison.tasks:
        table.add_row(escape(delta.task), f"{delta.a:.3f}", f"{delta.b:.3f}", f"{delta.delta:+.3f}")
    table.add_section()
    table.add_row(
        "overall", f"{comparison.mean_a:.3f}", f"{comparison.mean_b:.3f}", f"{comparison.delta:+.3f}"
    )
    out.print(table)
    out.print(
        f"B-A mean reward {comparison.delta:+.3f}, 95% CI [{comparison.low:+.3f}, {comparison.high:+.3f}] "
        f"over {len(comparison.tasks)} tasks (paired bootstrap)"
    )
    for label, only in (("only in A", comparison.only_a), ("only in B", comparison.only_b)):
        if only:
            out.print(f"{label}: {escape(', '.join(only))}")
