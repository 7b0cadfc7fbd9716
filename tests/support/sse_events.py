"""Server-sent events as the tests and benchmarks read them from the API (nothing else of the suite needed:
bench/replicas.py imports it too)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx


def events_of(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The events of an open SSE response, each as it arrives: its name, id and JSON data."""
    current: dict[str, Any] = {}
    for line in response.iter_lines():
        if line.startswith("event: "):
            current["event"] = line[7:]
        elif line.startswith("id: "):
            current["id"] = int(line[4:])
        elif line.startswith("data: "):
            current["data"] = json.loads(line[6:])
        elif not line and "data" in current:
            yield current
            current = {}
