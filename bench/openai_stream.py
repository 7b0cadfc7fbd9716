"""The OpenAI endpoint's time to the first streamed content byte, vs the scripted model's own: a new chat
and the next turn of one.

    python -m bench.openai_stream [-n 50] [--keys 0,10000]

Each round measures the scripted model directly, then a new chat, then the next turn of a chat by its
header and by its history, so the machine's load shifts all four alike; "added" is a /v1 figure less its
round's direct one, the figure bench/targets.py checks (issue 27: at most 20 ms on a new chat).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from control_plane.api.app import create_app
from control_plane.config.settings import load_settings
from control_plane.models.fake_llm import FakeLLM
from control_plane.store.tokens import TokenStore

from . import targets
from .served import serve
from .stats import Results, report


def _content(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or [{}]
    return str((choices[0].get("delta") or {}).get("content") or "")


def first_content(url: str, body: dict[str, Any], headers: dict[str, str]) -> float:
    """Seconds from sending a streaming request to the first chunk with content. http.client sends the
    request in one write and reads lines as they come, so neither side waits on a delayed ACK."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        start = time.perf_counter()
        connection.request(
            "POST", parts.path, json.dumps(body), {**headers, "Content-Type": "application/json"}
        )
        response = connection.getresponse()
        first = None
        while line := response.readline():  # to the end: the turn is over when the next request comes
            if first is None and line.startswith(b"data: {") and _content(json.loads(line[6:])):
                first = time.perf_counter() - start
    finally:
        connection.close()
    if first is None:
        raise RuntimeError(f"the stream had no content (status {response.status})")
    return first


def openai_first_byte(n: int, keys: int = 0) -> dict[str, list[float]]:
    """First content byte, in rounds of: the scripted model directly, a new chat through /v1, the next
    turn of a chat by its session header, the next turn of a chat by the history a front end sends
    (found by its conversation key). `keys`: conversation keys the profile already holds, as a server
    that has seen that many chats does. Each /v1 figure also less its round's direct one ("added"), and
    a new chat less its round's next turn: what opening the session costs."""
    turns = [{"text": "hello from the scripted model"}] * (5 * n + 20)
    with FakeLLM(turns) as model, tempfile.TemporaryDirectory() as root:
        chat = {"model": "scripted", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        settings = {"name": "openai/scripted", "api_base": model.url, "api_key": "k", "retries": 0}

        def settings_for(profile: str) -> Any:
            return load_settings(
                profile, root=Path(root), model=settings, backend="local", learning={"enabled": False}
            )

        home = settings_for("default").home
        home.mkdir(parents=True, exist_ok=True)
        held = {hashlib.sha256(str(i).encode()).hexdigest(): f"s-held{i:014d}" for i in range(keys)}
        (home / "openai-conversations.json").write_text(json.dumps(held))  # an old profile's keys
        token = TokenStore(Path(root)).create("default")
        headers = {"Authorization": f"Bearer {token}"}
        figures: dict[str, list[float]] = {name: [] for name in FIGURES}
        with serve(create_app(Path(root), settings_for)) as base:
            url = f"{base}/v1/chat/completions"
            session = _session_of(url, chat, headers)
            reply = {"role": "assistant", "content": "hello from the scripted model"}
            for i in range(n + 3):
                direct = first_content(f"{model.url}/chat/completions", chat, {})
                opened = [{"role": "user", "content": f"hi {keys} {i}"}]  # a new first message: a new chat
                new = first_content(url, {**chat, "messages": opened}, headers)
                by_header = first_content(url, chat, {**headers, "X-Hermetic-Session": session})
                history = [*opened, reply, {"role": "user", "content": "and then?"}]
                by_history = first_content(url, {**chat, "messages": history}, headers)
                if i < 3:  # warm-up rounds
                    continue
                for name, value in zip(FIGURES, (direct, new, by_header, by_history), strict=False):
                    figures[name].append(value)
                figures["added, a new chat"].append(new - direct)
                figures["added, its next turn by header"].append(by_header - direct)
                figures["added, its next turn by history"].append(by_history - direct)
                figures["a new chat less its round's next turn by history"].append(new - by_history)
        return figures


FIGURES = (
    "the scripted model directly",
    "through /v1, a new chat",
    "through /v1, its next turn by header",
    "through /v1, its next turn by history",
    "added, a new chat",
    "added, its next turn by header",
    "added, its next turn by history",
    "a new chat less its round's next turn by history",
)


def _session_of(url: str, body: dict[str, Any], headers: dict[str, str]) -> str:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        connection.request(
            "POST",
            parts.path,
            json.dumps({**body, "stream": False}),
            {**headers, "Content-Type": "application/json"},
        )
        response = connection.getresponse()
        response.read()
        return response.getheader("X-Hermetic-Session") or ""
    finally:
        connection.close()


def collect(n: int, keys: list[int]) -> Results:
    results: Results = {}
    for count in keys:
        for name, samples in openai_first_byte(n, count).items():
            results[f"first content byte, {name} ({count} keys held)"] = samples
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=50)
    parser.add_argument(
        "--keys", default="0,10000", help="conversation keys held (10000: as many as a profile keeps)"
    )
    args = parser.parse_args()
    results = collect(args.iterations, [int(k) for k in args.keys.split(",")])
    report("/v1 first streamed byte", results, Path(__file__).parent / "results", {"n": args.iterations})
    targets.show(targets.check(results))
