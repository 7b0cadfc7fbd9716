"""Control-plane overhead per agent step: everything between two model calls, with the model call
itself excluded. Each step is one `terminal` call running `true` in the session's sandbox: storing
the reply, events, the tool round trip, the audit row, the tool result, building the next request.
The floor, in the same run: a raw httpx POST of a small chat request to the same scripted server
(a reused keep-alive client), what one exchange with the model's server costs here.

    python -m bench.agent_step [-n 200] [--backends docker,local]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

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


def raw_posts(url: str, n: int) -> list[float]:
    """Seconds per raw POST of a small chat request, after WARMUP, on one keep-alive connection."""
    body = {"model": "bench", "messages": [{"role": "user", "content": "Say hello."}]}
    out = []
    with httpx.Client(base_url=url, headers={"Authorization": "Bearer bench"}) as client:
        for i in range(n + WARMUP):
            start = time.perf_counter()
            client.post("/chat/completions", json=body).raise_for_status()
            if i >= WARMUP:
                out.append(time.perf_counter() - start)
    return out


def step_overheads(backend: str, steps: int, floor: list[float] | None = None) -> list[float]:
    """The gaps between model calls; with `floor`, the raw POSTs' times are put there first."""
    turns: list[dict[str, Any]] = [{"tool_calls": [{"name": "terminal", "arguments": {"command": "true"}}]}]
    posts = [{"text": "hello"}] * (steps + WARMUP) if floor is not None else []
    with (
        FakeLLM(posts + turns * (steps + WARMUP) + [{"text": "done"}]) as server,
        tempfile.TemporaryDirectory() as root,
    ):
        if floor is not None:
            floor += raw_posts(server.url, steps)
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
    results: dict[str, list[float]] = {}
    for backend in backends:
        floor: list[float] = []
        results[f"hermetic {backend}: agent step overhead (scripted model, `true` tool)"] = step_overheads(
            backend, n, floor
        )
        results[f"floor: raw httpx POST to the scripted model (agent step run, {backend})"] = floor
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--steps", type=int, default=200)
    parser.add_argument("--backends", default="docker,local")
    args = parser.parse_args()
    results = collect(args.backends.split(","), args.steps)
    report("Agent step overhead (model call excluded)", results, Path(__file__).parent / "results", {})
