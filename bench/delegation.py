"""What a delegate call costs, with the scripted model (so the model's own time is near zero).

- child start to its first model request: from the delegate call's tool_start to the child's first
  model call, with a fresh sandbox (created on the child's first tool call, so not in this figure) and
  with a fork of the parent's (made before the child starts; only where the backend has `Sandbox.fork`,
  else the figure says so);
- child start to its first tool result (`true`): the same, plus the sandbox (created or forked);
- four children that each run `sleep 0.5`: one delegate call of four tasks (parallel) against four
  delegate calls of one task (one after another).

    python -m bench.delegation [-n 5] [--backends local,docker]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from control_plane.agent.agent import Agent
from control_plane.config.settings import load_settings
from control_plane.events import ChildStart, Event
from control_plane.models.fake_llm import FakeLLM
from control_plane.models.router import ModelReply, Router

from .stats import Figure, Results, report


class TimedRouter(Router):
    """The real router, noting when each model call starts and for which agent (its first message)."""

    def __init__(self, router: Router) -> None:
        self.__dict__.update(router.__dict__)
        self.starts: list[tuple[float, str]] = []

    async def complete(self, messages: list[dict[str, Any]], *args: Any, **kwargs: Any) -> ModelReply:
        first = next((str(m.get("content")) for m in messages if m.get("role") == "user"), "")
        self.starts.append((time.perf_counter(), first))
        return await super().complete(messages, *args, **kwargs)


def delegate(tag: str, children: range) -> dict[str, Any]:
    """The parent's delegate call (its first message contains `tag`) of these children's tasks."""
    goals = [{"goal": f"{tag}-child-{k}: run it"} for k in children]
    return {"match": f"{tag}:", "tool_calls": [{"name": "delegate", "arguments": {"tasks": goals}}]}


def child_turns(tag: str, children: range, command: str) -> list[dict[str, Any]]:
    """Each child runs `command`, then answers."""
    run = {"name": "terminal", "arguments": {"command": command}}
    turns: list[dict[str, Any]] = []
    for k in children:
        turns += [
            {"match": f"{tag}-child-{k}", "tool_calls": [run]},
            {"match": f"{tag}-child-{k}", "text": "ok"},
        ]
    return turns


class Bench:
    def __init__(self, server: FakeLLM, root: str, backend: str) -> None:
        model = {"name": "openai/bench", "api_base": server.url, "api_key": "bench", "retries": 0}
        settings = load_settings(root=root, model=model, backend=backend, learning={"enabled": False})
        self.server = server
        self.agent = Agent(settings)
        self.router = TimedRouter(self.agent.router)
        self.agent.router = self.router

    def turn(self, script: list[dict[str, Any]], text: str) -> list[tuple[float, Event]]:
        self.server.load(script)
        self.router.starts = []
        events: list[tuple[float, Event]] = []
        conversation = self.agent.new_conversation()
        try:
            end = asyncio.run(conversation.run(text, lambda e: events.append((time.perf_counter(), e))))
            assert end.reason == "done", f"the bench's turn ended {end.reason}"
        finally:
            conversation.close()
        return events

    def child_start(self, tag: str, warm_parent: bool) -> tuple[float, float, str]:
        """Seconds from the delegate call's start to the child's first model call and to its first tool
        result, and how its sandbox was made."""
        script = [
            delegate(tag, range(1)),
            *child_turns(tag, range(1), "true"),
            {"match": f"{tag}:", "text": "done"},
        ]
        if warm_parent:  # a parent with a sandbox in use: the one a fork copies
            warm = {"name": "terminal", "arguments": {"command": "true"}}
            script.insert(0, {"match": f"{tag}:", "tool_calls": [warm]})
        events = self.turn(script, f"{tag}: delegate one")
        began = next(t for t, e in events if e.type == "tool_start" and e.name == "delegate")
        first_call = next(t for t, first in self.router.starts if f"{tag}-child-0" in first)
        first_tool = next(t for t, e in events if e.type == "tool_end" and e.delegate_call)
        how = next(e.sandbox for _, e in events if isinstance(e, ChildStart))
        return first_call - began, first_tool - began, how

    def four(self, tag: str, parallel: bool) -> float:
        """Seconds of delegate calls for four children that each sleep 0.5 s."""
        calls = [delegate(tag, range(4))] if parallel else [delegate(tag, range(k, k + 1)) for k in range(4)]
        script = [*calls, *child_turns(tag, range(4), "sleep 0.5"), {"match": f"{tag}:", "text": "done"}]
        events = self.turn(script, f"{tag}: four children")
        return sum(e.duration_ms for _, e in events if e.type == "tool_end" and e.name == "delegate") / 1000


def figures(backend: str, n: int) -> Results:
    results: Results = {}
    with FakeLLM() as server, tempfile.TemporaryDirectory() as root:
        bench = Bench(server, root, backend)
        try:
            for label, warm in (("fresh sandbox", False), ("fork of the parent's", True)):
                samples = [bench.child_start(f"S{k}{warm}", warm) for k in range(n + 1)][1:]  # 1 warm-up
                made = {how for _, _, how in samples}
                wanted = {"fork" if warm else "fresh"}
                note = "" if made == wanted else f"no Sandbox.fork on this backend: {', '.join(made)}"
                results[f"hermetic {backend}: delegate, child start to first model call ({label})"] = Figure(
                    [first for first, _, _ in samples], note
                )
                results[f"hermetic {backend}: delegate, child start to first tool result ({label})"] = Figure(
                    [tool for _, tool, _ in samples], note
                )
            for label, parallel in (("in parallel", True), ("one after another", False)):
                runs = [bench.four(f"F{k}{parallel}", parallel) for k in range(n + 1)]
                results[f"hermetic {backend}: 4 children x `sleep 0.5`, {label}"] = runs[1:]  # 1 warm-up
        finally:
            bench.agent.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--iterations", type=int, default=5, help="samples per figure")
    parser.add_argument("--backends", default="local,docker")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    results: Results = {}
    for backend in args.backends.split(","):
        results |= figures(backend, args.iterations)
    path = report("Delegation overhead (scripted model)", results, args.out, {"backends": args.backends})
    print(f"raw samples: {path}")


if __name__ == "__main__":
    main()
