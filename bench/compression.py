"""`python -m bench.compression`: what the compression check costs before each model step.

A generated history of 100 tool steps (about 600 KB, 130k tokens) is counted with litellm's token
counter for three models: whole with one `token_counter` call, per message from scratch (a fresh
Compressor), and per message from the Compressor's cache with one new step (the agent loop's case).
The last figure is a `maybe_compress` that finds the history under the threshold: the price of every
step that does not compress.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from control_plane.agent.compression import Compressor
from control_plane.config.settings import CompressionSettings, ModelSettings
from control_plane.models.router import Router, _litellm

from .stats import cpu_noise, report, sample

MODELS = ["openai/gpt-4.1", "anthropic/claude-sonnet-4-5", "openai/local-server"]


def step(k: int) -> list[dict[str, Any]]:
    """A user message, a terminal call and its output (about 1,300 tokens)."""
    arguments = json.dumps({"command": f"ls -la /workspace/dir{k}"})
    call = {"id": f"c{k}", "type": "function", "function": {"name": "terminal", "arguments": arguments}}
    return [
        {"role": "user", "content": "hello world " * 50},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{k}", "name": "terminal", "content": "output line\n" * 400},
    ]


def history(steps: int) -> list[dict[str, Any]]:
    system = {"role": "system", "content": "You are a benchmark. " * 100}
    return [system] + [message for k in range(steps) for message in step(k)]


def figures(model: str, messages: list[dict[str, Any]], n: int) -> dict[str, list[float]]:
    litellm = _litellm()
    settings = CompressionSettings(context_window=10_000_000)  # never reached: the no-op path
    compressor = Compressor(settings, Router(ModelSettings()))
    compressor.count(messages, model)
    grown = list(messages)

    def one_more_step() -> None:
        grown.extend(step(len(grown)))
        compressor.count(grown, model)

    return {
        f"{model}: token_counter, whole history": sample(
            lambda: litellm.token_counter(model=model, messages=messages), n
        ),
        f"{model}: Compressor.count, from scratch": sample(
            lambda: Compressor(settings, Router(ModelSettings())).count(messages, model), n
        ),
        f"{model}: Compressor.count, cached + 1 step": sample(one_more_step, n),
        f"{model}: maybe_compress, under the threshold": sample(
            lambda: asyncio.run(compressor.maybe_compress(grown, model)), n
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--iterations", type=int, default=20, help="samples per figure")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    noise = cpu_noise()
    messages = history(100)
    results: dict[str, list[float]] = {}
    for model in MODELS:
        results |= figures(model, messages, args.iterations)
    tokens = _litellm().token_counter(model=MODELS[0], messages=messages)
    size = len(json.dumps(messages))
    extra = {"cpu_loop_ms": noise, "messages": len(messages), "chars": size, "tokens": tokens}
    path = report("Compression check per model step", results, args.out, extra)
    print(f"history: {len(messages)} messages, {size:,} characters, {tokens:,} tokens ({MODELS[0]})")
    print(f"CPU noise loop: {noise:.1f} ms; raw samples: {path}")


if __name__ == "__main__":
    main()
