"""Issue 19's figures: scheduler overhead per run (due time to the model's first request), batch
throughput on Docker and its scaling with workers, and the export rate over many stored sessions.

    python -m bench.unattended [-n 30] [--prompts 100] [--scale 1,2,4,8] [--scale-prompts 24]
        [--sessions 10000] [--backend docker] [--skip scheduler,batch,export]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import tempfile
import time
from pathlib import Path
from typing import Any

from control_plane.agent.agent import Agent
from control_plane.batch import BatchItem, BatchRunner
from control_plane.config.settings import load_settings
from control_plane.models.fake_llm import FakeLLM, ScriptedToolCall, Turn
from control_plane.safety.redaction import Redactor
from control_plane.scheduler import JobSpec, Scheduler
from control_plane.store import Store
from control_plane.trajectories import Quality, Selection, export

from .stats import Figure, Results, report


class StampedModel(FakeLLM):
    """Answers every conversation by its state (a terminal call first when `tool_first`, then text) and
    notes the wall-clock arrival of each request."""

    def __init__(self, tool_first: bool) -> None:
        super().__init__()
        self.tool_first = tool_first
        self.arrivals: list[float] = []

    def _next(self, body: dict[str, Any]) -> tuple[int, Turn | None]:
        arrived = time.time()
        with self._lock:
            self.arrivals.append(arrived)
            number = len(self.arrivals)
        if body["messages"][-1]["role"] == "user" and self.tool_first:
            return number, Turn(tool_calls=[ScriptedToolCall(name="terminal", arguments={"command": "true"})])
        return number, Turn(text="done")


def _settings(root: str, url: str, backend: str, **overrides: Any) -> Any:
    model = {"name": "openai/bench", "api_base": url, "api_key": "bench", "retries": 0}
    return load_settings(root=root, model=model, backend=backend, learning={"enabled": False}, **overrides)


def scheduler_overhead(runs: int) -> Figure:
    """A job every second; each run's first model request minus its occurrence's due time."""
    model = StampedModel(tool_first=False)
    with model, tempfile.TemporaryDirectory() as root:
        settings = _settings(root, model.url, "local")
        scheduler = Scheduler(settings)
        job = scheduler.jobs.add(settings.profile, JobSpec(schedule="every 1s", prompt="tick"), tz="UTC")

        async def main() -> None:
            warm = scheduler.agent_for(None).new_conversation()  # litellm's first call: imports, client
            await warm.run("warm up", lambda event: None)
            warm.close()
            model.arrivals.clear()
            scheduler.jobs.set_paused(settings.profile, job.id, False)  # from the next occurrence on
            await scheduler.start()
            while len(model.arrivals) < runs + 1:
                await asyncio.sleep(0.2)
            await scheduler.stop()

        asyncio.run(main())
        ok = [
            r for r in scheduler.jobs.history(settings.profile, job.id, limit=runs + 10) if r.status == "ok"
        ]
        scheduler.store.close()
    # One model request per run, runs one after another: the n-th request belongs to the n-th run.
    due = sorted(r.scheduled_for for r in ok)
    delays = [arrival - when for arrival, when in zip(model.arrivals, due, strict=False)][:runs]
    return Figure(delays, note=f"{len(delays)} runs of a job every 1s, model warmed up first")


def batch_throughput(backend: str, prompts: int, workers: int) -> Figure:
    """`prompts` prompts (one terminal call each, so each creates its sandbox) through `workers` workers."""
    model = StampedModel(tool_first=True)
    with model, tempfile.TemporaryDirectory() as root:
        settings = _settings(root, model.url, backend)
        agent = Agent(settings)
        runner = BatchRunner(agent, Path(root) / "results.jsonl", workers=workers, timeout=300)
        items = [BatchItem(id=f"p{i}", prompt=f"run {i}") for i in range(prompts)]
        try:
            summary = asyncio.run(runner.run(items))
        finally:
            agent.close()
    rate = summary.completed / summary.seconds
    return Figure(
        [summary.seconds],
        note=f"{prompts} prompts, {workers} workers: {rate:.2f} prompts/s, {summary.failed} failed",
        extra={"prompts_per_s": rate, "failed": summary.failed, "workers": workers},
    )


def export_rate(sessions: int) -> Figure:
    """Sessions of six messages (a tool call and its result), exported as ShareGPT with every filter on."""
    with tempfile.TemporaryDirectory() as root, Store(f"sqlite:///{root}/bench.db") as store:
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "terminal", "arguments": '{"command": "ls"}'},
        }
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": "<think>ls</think>Listing.", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "name": "terminal", "content": "a.txt\nb.txt"},
            {"role": "assistant", "content": "There are two files: a.txt and b.txt."},
            {"role": "user", "content": "thanks"},
        ]
        messages.append({"role": "assistant", "content": "You're welcome."})
        for _ in range(sessions):
            session = store.create_session("default")
            store.add_messages(session.id, messages)
        samples = []
        for _ in range(3):
            quality = Quality(known_tools={"terminal"}, max_iterations=90)
            out = io.StringIO()
            started = time.perf_counter()
            written = export(store, "default", Selection(), "sharegpt", out, quality, Redactor(), {})
            samples.append(time.perf_counter() - started)
    best = min(samples)
    return Figure(
        samples,
        note=f"{sessions} sessions: {sessions / best:,.0f} conversations/s (best of 3), {written} written",
        extra={"conversations_per_s": sessions / best},
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--runs", type=int, default=30, help="scheduler runs measured")
    parser.add_argument("--backend", default="docker")
    parser.add_argument("--prompts", type=int, default=100, help="prompts of the 8-worker batch")
    parser.add_argument("--scale", default="1,2,4,8", help="worker counts of the scaling figure")
    parser.add_argument("--scale-prompts", type=int, default=24, help="prompts per scaling step")
    parser.add_argument("--sessions", type=int, default=10_000, help="stored sessions for the export rate")
    parser.add_argument("--skip", default="", help="scheduler, batch, export")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    results: Results = {}
    if "scheduler" not in skip:
        results["scheduler: due time to the model's first request"] = scheduler_overhead(args.runs)
    if "batch" not in skip:
        results[f"batch {args.backend}: {args.prompts} prompts, 8 workers"] = batch_throughput(
            args.backend, args.prompts, 8
        )
        for workers in [int(w) for w in args.scale.split(",") if w]:
            results[f"batch {args.backend}: {args.scale_prompts} prompts, {workers} workers"] = (
                batch_throughput(args.backend, args.scale_prompts, workers)
            )
    if "export" not in skip:
        results[f"export sqlite: sharegpt over {args.sessions} sessions"] = export_rate(args.sessions)
    report("Unattended work (issue 19)", results, args.out, {"backend": args.backend})


if __name__ == "__main__":
    main()
