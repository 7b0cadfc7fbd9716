"""Sample collection and the printed table."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table


@dataclass
class Figure:
    """Samples (seconds) with what a bare distribution cannot say, e.g. "412 cmd/s, 0 failed"."""

    samples: list[float]
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    """Numbers behind the note, written to the JSON (throughput, failures, ...)."""


Results = dict[str, "list[float] | Figure"]
"""Figure name ("subject: what") -> samples in seconds, or a Figure when it carries a note."""


def console() -> Console:
    """Wide enough for figure names even when piped (rich would wrap at 80 columns)."""
    return Console(width=max(Console().width, 150))


def sample(fn: Callable[[], object], n: int, warmup: int = 3) -> list[float]:
    """Seconds per call of `fn`, `n` times after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def cpu_noise() -> float:
    """Milliseconds for a fixed CPU loop: printed at start and end so a reader can judge the spread."""
    start = time.perf_counter()
    total = 0
    for i in range(2_000_000):
        total += i * i
    return (time.perf_counter() - start) * 1000


def as_figure(value: list[float] | Figure) -> Figure:
    return value if isinstance(value, Figure) else Figure(value)


def summarize(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))] * 1000,
        "min_ms": ordered[0] * 1000,
        "max_ms": ordered[-1] * 1000,
        "n": len(ordered),
    }


def report(
    title: str, results: Mapping[str, list[float] | Figure], out_dir: Path, extra: Mapping[str, object]
) -> Path:
    table = Table(title=title)
    for column in ("figure", "median ms", "p90 ms", "min ms", "max ms", "n", "note"):
        table.add_column(column, justify="left" if column in ("figure", "note") else "right")
    for name, value in results.items():
        figure = as_figure(value)
        if not figure.samples:
            table.add_row(name, "-", "-", "-", "-", "0", figure.note)
            continue
        s = summarize(figure.samples)
        table.add_row(
            name,
            *(f"{s[k]:.3f}" for k in ("median_ms", "p90_ms", "min_ms", "max_ms")),
            str(s["n"]),
            figure.note,
        )
    console().print(table)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{time.strftime('%Y%m%d-%H%M%S')}.json"
    figures = {name: asdict(as_figure(value)) for name, value in results.items()}
    path.write_text(json.dumps({"extra": extra, "figures": figures}, indent=1))
    return path


def print_targets(targets: list[tuple[str, str, bool]], noise: tuple[float, float], path: Path) -> None:
    """A section's targets (text, measured, met) after its table, and the machine's noise."""
    for text, measured, met in targets:
        print(f"{'met   ' if met else 'MISSED'}  {text}: {measured}")
    print(f"CPU noise loop: {noise[0]:.1f} ms at start, {noise[1]:.1f} ms at end; raw samples: {path}")
