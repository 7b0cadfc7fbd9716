"""`hermetic sessions reindex`: run the vector indexer in the foreground until it has caught up, showing how
far it is (a progress bar on a terminal, one line a batch otherwise)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..store.indexer import VectorIndexer


def reindex(indexer: VectorIndexer, console: Console) -> int:
    """Embed batches until none is left; returns the messages embedded. Raises what the model raised."""
    start = indexer.progress()
    embedded = 0
    if not console.is_terminal:
        while step := indexer.step():
            embedded += step
            console.print(f"embedded {start.done + embedded}/{start.total} messages with {start.model}")
        return embedded
    columns = (
        TextColumn(f"embedding with {start.model}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console) as bar:
        task = bar.add_task("embed", total=start.total, completed=start.done)
        while step := indexer.step():
            embedded += step
            bar.advance(task, step)
    return embedded
