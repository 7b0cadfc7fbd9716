"""`--json` for the list commands: one JSON array of objects on stdout, the same fields every time, so
a script can rely on them (`hermetic skills list --json | jq '.[].name'`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

import typer

AsJson = Annotated[
    bool, typer.Option("--json", help="Print a JSON array of objects (stable field names) instead of a table")
]


def print_json(rows: Iterable[Mapping[str, Any]]) -> None:
    """The rows as one JSON array (values JSON cannot hold, like paths, as strings)."""
    print(json.dumps([dict(row) for row in rows], indent=2, default=str))
