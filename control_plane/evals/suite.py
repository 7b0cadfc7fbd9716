"""A suite: a directory of tasks (or a git URL / archive, fetched with the skills' source code), filtered
by globs on the task id and by tags. Unreadable tasks are listed apart; the others still run."""

from __future__ import annotations

import fnmatch
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..skills.sources import Limits, SourceError, fetch, parse_source
from ..skills.taps import TapError, Taps
from .task import CONFIG, INSTRUCTION, Task, TaskError, load_task

BUILTIN = Path(__file__).resolve().parents[2] / "evals"
"""The suite shipped with Hermetic (evals/ at the repository root)."""
SUITE_LIMITS = Limits(max_bytes=500 * 1024 * 1024, max_files=50_000)
TAP_SUITE = re.compile(r"([a-z0-9][a-z0-9_.-]*)/([A-Za-z0-9][A-Za-z0-9_.-]*)")
"""`TAP/NAME`: a suite named by one of the profile's taps (skills' taps.json)."""


class SuiteError(ValueError):
    """The suite itself cannot be had (no such path, a failed clone): nothing to run."""


@dataclass
class Suite:
    root: Path
    tasks: list[Task] = field(default_factory=list)
    errors: list[TaskError] = field(default_factory=list)


@dataclass(frozen=True)
class Filters:
    include: tuple[str, ...] = ()
    """Globs on the task id; none means every task."""
    exclude: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    """Keep tasks carrying at least one of these tags."""

    def keep(self, task_id: str, tags: list[str]) -> bool:
        if self.include and not any(fnmatch.fnmatchcase(task_id, g) for g in self.include):
            return False
        if any(fnmatch.fnmatchcase(task_id, g) for g in self.exclude):
            return False
        return not self.tags or bool(set(self.tags) & set(tags))


def resolve(source: str, cache: Path | None = None, taps: Path | None = None) -> Path:
    """The suite's directory: `builtin`, a local directory, `TAP/NAME` of a tap configured in `taps`
    (the profile's skills directory), or a git repository (URL or path, with `#REF[:SUBDIR]`) or an
    archive, fetched under `cache` by the skills' source code."""
    if source == "builtin":
        return BUILTIN
    path = Path(source).expanduser()
    if path.is_dir() and not (path / ".git").exists():
        return path.resolve()
    named = TAP_SUITE.fullmatch(source)
    registry = Taps(taps, SUITE_LIMITS) if taps is not None else None
    try:
        if named and registry is not None and not path.exists() and named.group(1) in registry.all():
            parsed = parse_source(registry.suite(named.group(1), named.group(2)))
        else:
            parsed = parse_source(source)
        into = Path(tempfile.mkdtemp(prefix="suite-", dir=cache))
        return fetch(parsed, into, SUITE_LIMITS).root
    except (SourceError, TapError) as exc:
        raise SuiteError(f"suite {source}: {exc}") from exc


def load_suite(root: Path, filters: Filters = Filters()) -> Suite:
    """Every task directory under `root` (the root itself when it is one task), filtered."""
    if not root.is_dir():
        raise SuiteError(f"suite {root}: no such directory")
    if _looks_like_task(root):
        candidates = [root]
    else:
        candidates = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    suite = Suite(root=root)
    for path in candidates:
        loaded = load_task(path)
        tags = loaded.tags if isinstance(loaded, Task) else []
        if not filters.keep(path.name, tags):
            continue
        if isinstance(loaded, Task):
            suite.tasks.append(loaded)
        else:
            suite.errors.append(loaded)
    return suite


def _looks_like_task(path: Path) -> bool:
    return (path / CONFIG).is_file() or (path / INSTRUCTION).is_file()
