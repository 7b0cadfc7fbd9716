"""Run the mem0 provider's three hooks in a fresh process, recording every network call it makes.

`python tests/support/mem0_offline.py ROOT` (tests/memory/test_memory_mem0.py runs it in a network namespace
of its own with only loopback): an audit hook, installed before anything is imported, records each socket
connect, sendto and name lookup; the scripted model serves mem0's LLM and embeddings on loopback. Prints one
JSON object: the calls seen, the context injected at a turn's start, and where mem0 wrote its files.
"""

from __future__ import annotations

import sys
from typing import Any

calls: list[tuple[str, str]] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in ("socket.connect", "socket.sendto", "socket.sendmsg"):
        address = args[-1]
        calls.append((event, str(address[0] if isinstance(address, tuple) else address)))
    elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex"):
        calls.append((event, str(args[0])))


sys.addaudithook(_audit)

import json  # noqa: E402 (after the hook: the imports' own calls are recorded too)
from pathlib import Path  # noqa: E402

from control_plane.config.settings import load_settings  # noqa: E402
from control_plane.memory.mem0_provider import Mem0Provider  # noqa: E402
from control_plane.memory.providers import Providers, TurnStart  # noqa: E402
from control_plane.models.fake_llm import FakeLLM  # noqa: E402

EXTRACTED = {"memory": [{"text": "User deploys on Fridays"}]}


def main(root: Path) -> None:
    with FakeLLM([{"match": "## New Messages", "text": json.dumps(EXTRACTED)}]) as model:
        spec = {"type": "mem0", "embedder": {"model": "embed", "api_base": model.url, "api_key": "k"}}
        settings = load_settings(
            root=root,
            model={"name": "openai/scripted", "api_base": model.url, "api_key": "k"},
            memory={"providers": [spec]},
        )
        providers = Providers([Mem0Provider(settings.memory.providers[0], settings)])  # type: ignore[arg-type]
        providers.session_end("default", "s-1", "Session deploys", ["we always deploy on Fridays"])
        providers.after_memory_write("default", "user", ["Works in Lisbon"])
        providers.wait_told(30)
        context, notices = providers.turn_start(TurnStart("default", "s-2", "when do we deploy on Fridays?"))
        import mem0.memory.setup as mem0_setup
        import mem0.memory.telemetry as mem0_telemetry

        health = [h.model_dump() for h in providers.health()]
        print(
            json.dumps(
                {
                    "calls": calls,
                    "context": context,
                    "notices": notices,
                    "health": health,
                    "telemetry": mem0_telemetry.MEM0_TELEMETRY,
                    "mem0_dir": mem0_setup.mem0_dir,
                }
            )
        )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
