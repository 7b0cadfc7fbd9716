"""Control-plane overhead per agent step: everything between two model calls, with the model call
itself excluded. Each step is one `terminal` call running `true` in the session's sandbox: storing
the reply, events, the tool round trip, the audit row, the tool result, building the next request.

    python -m bench.agent_step [-n 200] [--backends docker,local]
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
from control_plane.models.fake_llm import FakeLLM
from control_plane.models.router import ModelReply, Router

from .stats import report

WARMUP = 3


class TimedRouter(Router):
    """The real router, noting when each model call starts and ends."""

    def __init__(self, router: Router) -> None:
        self.__dict__.update(router.__dict__)
        self.calls: list[tuple[float, float]] = []

    async def complete(self, *args: Any, **kwargs: Any) -> ModelReply:
        start = time.perf_counter()
        try:
            return await super().complete(*args, **kwargs)
        finally:
            self.calls.append((start, time.perf_counter()))


def step_overheads(backend: str, steps: int) -> list[float]:
    turns: list[dict[str, Any]] = [{"tool_calls": [{"name": "terminal", "arguments": {"command": "true"}}]}]
    with (
        FakeLLM(turns * (steps + WARMUP) + [{"text": "done"}]) as server,
        tempfile.TemporaryDirectory() as root,
    ):
        model = {"name": "openai/bench", "api_base": server.url, "api_key": "bench", "retries": 0}
        settings = load_settings(  # no background review: it would ask the script for one more reply
            root=root,
            model=model,
            backend=backend,
            limits={"max_iterations": steps + 10},
            learning={"enabled": False},
        )
        agent = Agent(settings)
        router = TimedRouter(agent.router)
        agent.router = router
        conversation = agent.new_conversation()
        try:
            end = asyncio.run(conversation.run("go", lambda event: None))
            assert end.reason == "done", end
        finally:
            conversation.close()
            agent.close()
    gaps = [nxt[0] - prev[1] for prev, nxt in zip(router.calls, router.calls[1:], strict=False)]
    return gaps[WARMUP:]


def collect(backends: list[str], n: int) -> dict[str, list[float]]:
    return {
        f"hermetic {backend}: agent step overhead (scripted model, `true` tool)": step_overheads(backend, n)
        for backend in backends
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--steps", type=int, default=200)
    parser.add_argument("--backends", default="docker,local")
    args = parser.parse_args()
    results = collect(args.backends.split(","), args.steps)
    report("Agent step overhead (model call excluded)", results, Path(__file__).parent / "results", {})
