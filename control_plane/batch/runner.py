"""A batch of prompts run by N workers on one agent: each prompt its own session (source `batch`) and its
own sandbox, with a timeout and the iteration budget; each result appended to results.jsonl as it ends."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..agent.agent import Agent
from ..agent.unattended import Tally, run_until
from ..config.settings import Settings
from .prompts import BatchItem


class BatchResult(BaseModel):
    """One line of results.jsonl."""

    id: str
    prompt: str
    category: str | None = None
    final: str
    """The final answer ('' when the run did not give one)."""
    status: str
    """completed, failed (a model or internal error), timeout, budget (hit the iteration limit)."""
    session_id: str
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    duration_s: float
    error: str | None = None


class Summary(BaseModel):
    total: int
    skipped: int
    """Already completed in an earlier run (--resume)."""
    statuses: dict[str, int]
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float

    @property
    def completed(self) -> int:
        return self.statuses.get("completed", 0)

    @property
    def failed(self) -> int:
        return sum(n for status, n in self.statuses.items() if status != "completed")


def batch_settings(settings: Settings, max_iterations: int | None) -> Settings:
    """A batch's agent: its sessions are independent samples, so no background learning review after
    each one; `max_iterations` (model calls per prompt) when given."""
    update: dict[str, Any] = {"learning": settings.learning.model_copy(update={"enabled": False})}
    if max_iterations:
        update["limits"] = settings.limits.model_copy(update={"max_iterations": max_iterations})
    return settings.model_copy(update=update)


class BatchRunner:
    def __init__(self, agent: Agent, results: Path, *, workers: int, timeout: float) -> None:
        self.agent = agent
        self.results = results
        self.workers = workers
        self.timeout = timeout
        self._lock = threading.Lock()

    async def run(
        self,
        items: list[BatchItem],
        skipped: int = 0,
        on_result: Callable[[BatchResult], None] = lambda r: None,
    ) -> Summary:
        """Run every item, `workers` at a time; `on_result` sees each result once it is on disk."""
        started = time.monotonic()
        queue: asyncio.Queue[BatchItem] = asyncio.Queue()
        for item in items:
            queue.put_nowait(item)
        finished: list[BatchResult] = []

        async def worker() -> None:
            while not queue.empty():
                item = queue.get_nowait()
                try:
                    result = await self.one(item)
                except Exception as exc:  # one prompt's failure (its sandbox, the store) is its own result
                    result = BatchResult(
                        id=item.id,
                        prompt=item.prompt,
                        category=item.category,
                        final="",
                        status="failed",
                        session_id="",
                        tool_calls=0,
                        prompt_tokens=0,
                        completion_tokens=0,
                        duration_s=0.0,
                        error=f"{type(exc).__name__}: {exc}",
                    )
                await asyncio.to_thread(self._append, result)
                finished.append(result)
                on_result(result)

        await asyncio.gather(*(worker() for _ in range(min(self.workers, len(items)) or 1)))
        return Summary(
            total=len(items) + skipped,
            skipped=skipped,
            statuses=dict(Counter(r.status for r in finished)),
            tool_calls=sum(r.tool_calls for r in finished),
            prompt_tokens=sum(r.prompt_tokens for r in finished),
            completion_tokens=sum(r.completion_tokens for r in finished),
            seconds=time.monotonic() - started,
        )

    async def one(self, item: BatchItem) -> BatchResult:
        """One prompt in a new session, to its end or its timeout; the sandbox is released after."""
        started = time.monotonic()
        tally = Tally()
        errors = tally.errors

        conversation = await asyncio.to_thread(
            self.agent.new_conversation, title=f"batch: {item.id}", source="batch", toolsets=item.toolsets
        )
        try:
            end, timed_out = await run_until(conversation, item.prompt, tally, self.timeout)
        finally:
            await asyncio.to_thread(conversation.close)
        status = {"done": "completed", "budget": "budget", "error": "failed"}.get(end.reason, "failed")
        if timed_out:
            status = "timeout"
            errors.append(f"timed out after {self.timeout:g}s")
        return BatchResult(
            id=item.id,
            prompt=item.prompt,
            category=item.category,
            final=end.content if end.reason == "done" else "",
            status=status,
            session_id=conversation.id,
            tool_calls=tally.tool_calls,
            prompt_tokens=tally.prompt_tokens,
            completion_tokens=tally.completion_tokens,
            duration_s=round(time.monotonic() - started, 3),
            error="; ".join(errors) or None,
        )

    def _append(self, result: BatchResult) -> None:
        """One line, written whole and flushed: a crash loses at most the line being written."""
        line = result.model_dump_json() + "\n"
        with self._lock, self.results.open("a", encoding="utf-8") as out:
            out.write(line)
            out.flush()


def write_summary(path: Path, summary: Summary) -> None:
    data: dict[str, Any] = summary.model_dump()
    data.update(completed=summary.completed, failed=summary.failed)
    path.write_text(json.dumps(data, indent=2) + "\n")
