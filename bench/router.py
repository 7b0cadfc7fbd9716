"""`python -m bench.router`: the model router's own cost per call, on top of the HTTP round trip.

Both sides talk to the scripted server over loopback: the floor is a raw httpx POST of the same body
(a reused keep-alive client, reading the whole reply); the figure is Router.complete, which sends to an
OpenAI-compatible server such as this one with the openai SDK, and once more with `client: litellm`.
The difference of the medians is what the router (the SDK or litellm, retries, events) adds to every
model call; a bare litellm.acompletion of the same request shows how much of that is litellm's.
The server runs in its own process (`hermetic dev fake-llm`), as a provider would: in this process its
thread would wait for the GIL behind litellm's work and add that wait to the router's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from control_plane.config.settings import ModelSettings
from control_plane.models.router import Router, _litellm

from .stats import cpu_noise, report, summarize

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}]
REPLY = {"text": "Hello! How can I help you today?"}
FIGURES = 7
WARMUP = 5


@contextmanager
def scripted_server(turns: int) -> Iterator[str]:
    """`hermetic dev fake-llm` in a subprocess serving `turns` replies; yields its api_base."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as script:
        json.dump([REPLY] * turns, script)
        script.flush()
        argv = [
            sys.executable,
            "-m",
            "control_plane",
            "dev",
            "fake-llm",
            "--script",
            script.name,
            "--port",
            "0",
        ]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            found = re.search(r"at (http://\S+/v1) ", proc.stdout.readline())
            if not found:
                raise RuntimeError("hermetic dev fake-llm did not start")
            yield found[1]
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)


async def timed(call: Callable[[], Awaitable[object]], n: int) -> list[float]:
    """Seconds per call, after WARMUP calls. Figures run one after the other, not interleaved: litellm
    leaves logging tasks on the loop after each call, which would land in the next figure's time."""
    for _ in range(WARMUP):
        await call()
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await call()
        out.append(time.perf_counter() - start)
    return out


async def collect(url: str, n: int) -> dict[str, list[float]]:
    router = Router(ModelSettings(name="openai/scripted", api_base=url, api_key="test"))  # type: ignore[arg-type]
    via_litellm = Router(
        ModelSettings(name="openai/scripted", api_base=url, api_key="test", client="litellm")
    )  # type: ignore[arg-type]
    body = {"model": "scripted", "messages": MESSAGES}
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer test"}) as client:

        async def raw() -> None:
            (await client.post("/chat/completions", json=body)).raise_for_status()

        async def raw_stream() -> None:
            stream_body = body | {"stream": True, "stream_options": {"include_usage": True}}
            async with client.stream("POST", "/chat/completions", json=stream_body) as response:
                async for _ in response.aiter_lines():
                    pass

        litellm = _litellm()
        bare = {"model": "openai/scripted", "api_base": url, "api_key": "test", "messages": MESSAGES}

        async def bare_litellm_stream() -> None:
            stream = await litellm.acompletion(**bare, stream=True, stream_options={"include_usage": True})
            async for _ in stream:
                pass

        figures: dict[str, Callable[[], Awaitable[object]]] = {
            "raw httpx POST": raw,
            "litellm.acompletion": lambda: litellm.acompletion(**bare),
            "Router.complete(stream=False)": lambda: router.complete(MESSAGES, stream=False),
            "raw httpx POST, streamed": raw_stream,
            "litellm.acompletion, streamed": bare_litellm_stream,
            "Router.complete(stream=True)": lambda: router.complete(MESSAGES, stream=True),
            "Router.complete(stream=True), client=litellm": lambda: via_litellm.complete(
                MESSAGES, stream=True
            ),
        }
        return {name: await timed(call, n) for name, call in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--iterations", type=int, default=200, help="calls per figure")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    noise = cpu_noise()
    with scripted_server(FIGURES * (args.iterations + WARMUP)) as url:
        results = asyncio.run(collect(url, args.iterations))
    path = report(
        "Model router overhead (scripted server, loopback)", results, args.out, {"cpu_loop_ms": noise}
    )
    median = {name: summarize(samples)["median_ms"] for name, samples in results.items()}
    for mode, suffix in (("stream=False", ""), ("stream=True", ", streamed")):
        added = median[f"Router.complete({mode})"] - median[f"raw httpx POST{suffix}"]
        litellm = median[f"litellm.acompletion{suffix}"] - median[f"raw httpx POST{suffix}"]
        print(f"per call over raw HTTP, {mode}: the router {added:.2f} ms, bare litellm {litellm:.2f} ms")
    print(f"CPU noise loop: {noise:.1f} ms; raw samples: {path}")


if __name__ == "__main__":
    main()
