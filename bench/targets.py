"""Issue 7's targets and issue 27's /v1 first byte, checked on the figures of one run: each a ratio of
two medians (or one median against a bound, or a fleet's throughput or failures). Printed after the
table; a missing figure leaves its target unchecked."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from rich.table import Table

from .stats import Results, as_figure, console


@dataclass(frozen=True)
class Target:
    text: str
    figure: str
    versus: str | None  # None: `figure`'s median against `bound` ms
    bound: float
    faster: bool  # True: the ratio versus/figure must reach `bound`; False: figure/versus at most `bound`
    extra: str | None = None
    """Check this number of the figure's (Figure.extra: a fleet's throughput, its failures) against
    `bound` instead of its median: at least `bound` when `faster`, else at most."""


TARGETS = [
    Target(
        "docker round trip >= 50x faster than hermes-agent",
        "hermetic docker: `true` round trip",
        "hermes-agent docker: `true` round trip",
        50,
        True,
    ),
    Target(
        "docker round trip >= 50x faster than SWE-ReX",
        "hermetic docker: `true` round trip",
        "swe-rex docker: `true` round trip",
        50,
        True,
    ),
    Target(
        "docker round trip within 4x of persistent bash over one docker exec stream",
        "hermetic docker: `true` round trip",
        "floor: persistent bash over one docker exec stream",
        4,
        False,
    ),
    Target(
        "local round trip within 5x of persistent bash over a pipe",
        "hermetic local: `true` round trip",
        "floor: persistent bash over a pipe",
        5,
        False,
    ),
    Target(
        "ssh round trip within 2x of persistent bash over one ssh session (issue 38)",
        "hermetic ssh: `true` round trip",
        "floor: persistent bash over one ssh session",
        2,
        False,
    ),
    *(
        Target(
            f"{backend} agent step overhead within 2x of a raw POST to the model (issue 38)",
            f"hermetic {backend}: agent step overhead (scripted model, `true` tool)",
            f"floor: raw httpx POST to the scripted model (agent step run, {backend})",
            2,
            False,
        )
        for backend in ("docker", "local")
    ),
    Target(
        "docker create-to-first-command no slower than hermes-agent's",
        "hermetic docker: create to first command",
        "hermes-agent docker: create to first command",
        1,
        False,
    ),
    Target(
        "warm-pool acquire to first command under 20 ms (docker)",
        "hermetic docker: warm-pool acquire to first command",
        None,
        20,
        False,
    ),
    Target(
        "warm-pool acquire to first command under 20 ms (local)",
        "hermetic local: warm-pool acquire to first command",
        None,
        20,
        False,
    ),
    *(
        Target(
            f"/v1 adds at most 20 ms to the first streamed byte: {case} ({keys} keys held)",
            f"first content byte, added, {case} ({keys} keys held)",
            None,
            20,
            False,
        )
        for case in ("a new chat", "its next turn by history")
        for keys in (0, 10_000)
    ),
    *(
        Target(
            f"a session's first browser navigation from a warm pool, browser up, under 200 ms ({backend}; "
            "issue 38)",
            f"hermetic {backend}: first navigation of a session, warm pool, browser up",
            None,
            200,
            False,
        )
        for backend in ("docker", "local")
    ),
    Target(
        "skill verification of a trivial skill from the gate's warm pool under 150 ms (issue 38)",
        "hermetic docker: skill verification, trivial skill, warm pool",
        None,
        150,
        False,
    ),
    Target(
        "docker: 50 sandboxes x 20 commands at >= 2,000 cmd/s (issue 38)",
        "hermetic docker: 50 sandboxes x 20 commands",
        None,
        2000,
        True,
        extra="throughput_cmd_s",
    ),
    Target(
        "docker: 200 sandboxes x 20 commands, none failed (issue 38)",
        "hermetic docker: 200 sandboxes x 20 commands",
        None,
        0,
        False,
        extra="failed",
    ),
    Target(
        "PostgreSQL session_search at 100,000 messages under 5 ms (issue 38)",
        "store postgresql: session_search tool, two words (3 sessions, window and edges)",
        None,
        5,
        False,
    ),
    Target(
        "PostgreSQL substring fallback at 100,000 messages under 20 ms (issue 38)",
        "store postgresql: search, substring fallback",
        None,
        20,
        False,
    ),
]


def median_ms(results: Results, name: str) -> float | None:
    samples = as_figure(results[name]).samples if name in results else []
    return statistics.median(samples) * 1000 if samples else None


def check(results: Results) -> list[dict[str, object]]:
    """Each target with its measured value ("12.3x" or "4.1 ms") and whether it was met (None: a
    figure is missing from this run)."""
    rows: list[dict[str, object]] = []
    for target in TARGETS:
        if target.extra is not None:
            rows.append(_check_extra(results, target, target.extra))
            continue
        mine = median_ms(results, target.figure)
        other = median_ms(results, target.versus) if target.versus else None
        if mine is None or (target.versus and other is None):
            rows.append({"target": target.text, "measured": "not measured", "met": None})
            continue
        if other is None:
            measured, met = f"{mine:.2f} ms", mine < target.bound
        elif target.faster:
            measured, met = f"{other / mine:.0f}x faster", other / mine >= target.bound
        else:
            measured, met = f"{mine / other:.2f}x", mine / other <= target.bound
        rows.append({"target": target.text, "measured": measured, "met": met})
    return rows


def _check_extra(results: Results, target: Target, key: str) -> dict[str, object]:
    value = as_figure(results[target.figure]).extra.get(key) if target.figure in results else None
    if value is None:
        return {"target": target.text, "measured": "not measured", "met": None}
    met = value >= target.bound if target.faster else value <= target.bound
    return {"target": target.text, "measured": f"{value:,.0f}", "met": met}


def show(rows: list[dict[str, object]]) -> None:
    table = Table(title="Targets (medians of this run)")
    for column in ("target", "measured", "met"):
        table.add_column(column)
    for row in rows:
        met = "-" if row["met"] is None else "yes" if row["met"] else "MISSED"
        table.add_row(str(row["target"]), str(row["measured"]), met)
    console().print(table)
