"""Issue 34's ACP figure: a prompt's first streamed chunk through `hermetic acp` (a real subprocess over
stdio, the SDK's client side) vs the scripted model's own first content chunk. Target: <= 20 ms added.

    python -m bench.acp [-n 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from acp import PROTOCOL_VERSION, Client, spawn_agent_process, text_block
from acp.schema import AgentMessageChunk

from control_plane.models.fake_llm import FakeLLM

from .openai_stream import first_content
from .protocols import added
from .stats import Results, report

TARGET_MS = 20.0


class _FirstChunk:
    """The client side: notes when the first agent message chunk of the running prompt arrives."""

    def __init__(self) -> None:
        self.first: asyncio.Event = asyncio.Event()

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, AgentMessageChunk):
            self.first.set()


def acp_first_chunk(model_url: str, n: int) -> list[float]:
    with tempfile.TemporaryDirectory() as root:
        env = {
            "PATH": os.environ["PATH"],
            "HERMETIC_ROOT": root,
            "HERMETIC_BACKEND": "local",
            "HERMETIC_MODEL__NAME": "openai/scripted",
            "HERMETIC_MODEL__API_BASE": model_url,
            "HERMETIC_MODEL__API_KEY": "k",
            "HERMETIC_MODEL__RETRIES": "0",
            "HERMETIC_LEARNING__ENABLED": "false",
            **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
        }
        client = _FirstChunk()

        async def run() -> list[float]:
            command = (sys.executable, "-m", "control_plane", "acp")
            async with spawn_agent_process(cast(Client, client), *command, env=env) as (conn, _):
                await conn.initialize(protocol_version=PROTOCOL_VERSION)
                session = await conn.new_session(cwd=root, mcp_servers=[])
                times = []
                for i in range(n + 3):  # turns of one session, as an editor thread goes on
                    client.first.clear()
                    start = time.perf_counter()
                    prompt = asyncio.create_task(
                        conn.prompt(session_id=session.session_id, prompt=[text_block(f"hi {i}")])
                    )
                    await client.first.wait()
                    times.append(time.perf_counter() - start)
                    await prompt
                return times[3:]

        return asyncio.run(run())


def collect(n: int) -> Results:
    turns = [{"text": "hello from the scripted model"}] * (2 * n + 10)
    with FakeLLM(turns) as model:
        chat = {"model": "scripted", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        direct = [first_content(f"{model.url}/chat/completions", chat, {}) for _ in range(n + 3)][3:]
        through = acp_first_chunk(model.url, n)
    extra = (statistics.median(through) - statistics.median(direct)) * 1000
    verdict = "met" if extra <= TARGET_MS else "NOT met"
    return {
        "first content chunk, scripted model directly": direct,
        f"first agent_message_chunk, hermetic acp — {added('added', direct, through)} "
        f"(target <= {TARGET_MS:.0f} ms: {verdict})": through,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=200)
    args = parser.parse_args()
    report("ACP overhead", collect(args.iterations), Path(__file__).parent / "results", {"backend": "local"})
