"""The example skills shipped inside the package (`examples/` beside this module, package data in the
wheel), installed as `example:NAME`, or `example:` for all of them, through the same fetch, checks
and gate as any skill from outside."""

from __future__ import annotations

from pathlib import Path

from .format import SKILL_FILE
from .sources import SourceError

EXAMPLES = Path(__file__).parent / "examples"
PREFIX = "example:"


def is_example(text: str) -> bool:
    return text.strip().startswith(PREFIX)


def example_names() -> list[str]:
    return sorted(p.name for p in EXAMPLES.iterdir() if (p / SKILL_FILE).is_file())


def example_path(text: str) -> Path:
    """The directory `example:NAME` names (all of them for `example:`); SourceError for an unknown name."""
    name = text.strip()[len(PREFIX) :].strip("/")
    if not name:
        return EXAMPLES
    if name not in example_names():
        raise SourceError(f"no example skill {name!r}; the examples are: {', '.join(example_names())}")
    return EXAMPLES / name
