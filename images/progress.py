"""How far an image build is: the steps the builder reports (stage, packages or bytes done of how many),
read from debootstrap's own output and from the bytes of the import, and two ways to show them: a rich
progress bar at a terminal (`hermetic setup`, `python -m images.build`), a line per milestone in a log.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

log = logging.getLogger("images.build")

Unit = Literal["packages", "bytes", "steps"]
STAGES: tuple[str, ...] = (
    "download packages",
    "extract packages",
    "unpack packages",
    "configure packages",
    "upgrade and add packages",
    "pack the root filesystem",
    "docker import",
    "add the runtime",
)
"""A base build goes through all of them in order; a build that finds its base only the last."""


@dataclass(frozen=True)
class Step:
    """The build is in `stage` (one of STAGES), `done` of `total` `unit`s into it (total None: not
    known yet, as debootstrap never says how many packages it will fetch)."""

    stage: str
    done: int = 0
    total: int | None = None
    unit: Unit = "steps"
    detail: str = ""
    """What it is doing now (a package's name)."""


Report = Callable[[Step], None]


def ignore(step: Step) -> None:
    """The report of a build nobody watches."""


_RETRIEVING = re.compile(r"^I: (Retrieving) (\S+) \S+\s*$")
"""`I: Retrieving NAME VERSION` (the index files, `I: Retrieving Packages`, have no version)."""
_DONE_TO = re.compile(r"^I: (Extracting|Unpacking|Configuring) ([^\s:]+?)(?::[^\s.]+)?\.\.\.\s*$")
"""`I: Unpacking NAME:ARCH...` (not the stage's own `I: Unpacking required packages...`)."""
_STAGE_OF = {
    "Retrieving": "download packages",
    "Extracting": "extract packages",
    "Unpacking": "unpack packages",
    "Configuring": "configure packages",
}


class DebootstrapProgress:
    """Turns debootstrap's information lines (its standard output: `I: Retrieving libc6 2.36-9`,
    `I: Extracting ...`, `I: Unpacking ...`, `I: Configuring ...`) into Steps. The download's total is
    unknown while it runs; every later stage counts against the packages downloaded (debootstrap
    extracts only the required ones, so that stage may end short of its total)."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.seen: dict[str, set[str]] = {stage: set() for stage in _STAGE_OF.values()}

    def feed(self, line: str) -> None:
        match = _RETRIEVING.match(line) or _DONE_TO.match(line)
        if match is None:
            return
        stage = _STAGE_OF[match.group(1)]
        package = match.group(2)
        names = self.seen[stage]
        if package in names:  # a download retried, a package unpacked in both passes
            return
        names.add(package)
        fetched = len(self.seen["download packages"])
        total = None if stage == "download packages" else max(fetched, len(names))
        self.report(Step(stage, len(names), total, "packages", package))


class LogReport:
    """A line in the log at each stage's start and end and at every tenth of it (or every 25 packages
    when its total is unknown): setup.sh's log reads as progress without a terminal."""

    def __init__(self) -> None:
        self.stage: str | None = None
        self.mark = 0

    def __call__(self, step: Step) -> None:
        if step.stage != self.stage:
            self.stage, self.mark = step.stage, 0
            log.info("[%d/%d] %s", STAGES.index(step.stage) + 1, len(STAGES), step.stage)
        every = max(step.total // 10, 1) if step.total else 25
        if step.done >= self.mark + every or (step.total and step.done == step.total):
            self.mark = step.done
            log.info("  %s: %s", step.stage, _amount(step))


def _amount(step: Step) -> str:
    if step.unit == "bytes":
        total = f" of {step.total / 2**20:.0f} MiB" if step.total else ""
        return f"{step.done / 2**20:.0f} MiB{total}"
    return f"{step.done}" + (f" of {step.total}" if step.total else "") + f" {step.unit}"


class _Amount(ProgressColumn):
    """`12/57 packages`, or `120.0/310.2 MB` for a stage counted in bytes."""

    def render(self, task: Task) -> Text:
        if task.fields.get("unit") == "bytes":
            return DownloadColumn().render(task)
        total = f"/{task.total:.0f}" if task.total is not None else ""
        return Text(f"{task.completed:.0f}{total} {task.fields.get('unit', '')}")


@contextmanager
def progress_bar(console: Console) -> Iterator[Report]:
    """A rich progress bar, one line per stage reached, for as long as the block runs."""
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        _Amount(),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=console,
    )
    tasks: dict[str, TaskID] = {}

    def report(step: Step) -> None:
        if step.stage not in tasks:
            for task in bar.tasks:  # a later stage began: the earlier ones are done
                bar.update(task.id, total=max(task.completed, 1), completed=max(task.completed, 1), detail="")
            name = f"[{STAGES.index(step.stage) + 1}/{len(STAGES)}] {step.stage}"
            tasks[step.stage] = bar.add_task(name, total=step.total, detail="", unit=step.unit)
        bar.update(tasks[step.stage], completed=step.done, total=step.total, detail=step.detail)

    with bar:
        yield report
