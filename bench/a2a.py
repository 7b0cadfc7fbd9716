"""Issue 34's A2A figure: a task's round trip through `SendMessage` (JSON-RPC, the SDK's dispatcher and
task handling, waiting for the task to end) vs the same turn through the HTTP API (POST
/sessions/{id}/messages, then its events until turn_end). Both on one served app, one session each,
the scripted model, the local backend; rounds interleave the two so the machine's load shifts both alike.
Target: <= 10 ms added. `--words N` makes the reply N words, all sent by the model at once (a burst of
N streamed chunks: what the task's handling of each chunk costs).

    python -m bench.a2a [-n 100] [--words 1000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from control_plane.api.app import create_app
from control_plane.config.settings import load_settings
from control_plane.models.fake_llm import FakeLLM
from control_plane.store.tokens import TokenStore

from .protocols import added
from .served import serve
from .stats import Results, report

TARGET_MS = 10.0


def _send(http: httpx.Client, context_id: str, i: int) -> str:
    message = {
        "role": "ROLE_USER",
        "messageId": uuid.uuid4().hex,
        "parts": [{"text": f"hi {i}"}],
        **({"contextId": context_id} if context_id else {}),
    }
    body = {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": message}}
    task = http.post("/a2a", json=body, headers={"A2A-Version": "1.0"}).json()["result"]["task"]
    if task["status"]["state"] != "TASK_STATE_COMPLETED":
        raise RuntimeError(f"the task did not complete: {task['status']}")
    return str(task["contextId"])


def _post(http: httpx.Client, session: str, i: int) -> None:
    after = http.post(f"/sessions/{session}/messages", json={"content": f"hi {i}"}).json()["after"]
    events = http.get(f"/sessions/{session}/events", params={"after": after, "until_turn_end": "true"})
    if "event: turn_end" not in events.text:
        raise RuntimeError("the turn did not end")


def round_trips(model_url: str, n: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as root:
        model = {"name": "openai/scripted", "api_base": model_url, "api_key": "k", "retries": 0}

        def settings_for(profile: str) -> Any:
            return load_settings(  # a window no run here fills: long replies never compress mid-run
                profile,
                root=Path(root),
                model=model,
                backend="local",
                learning={"enabled": False},
                compression={"context_window": 10_000_000},
            )

        token = TokenStore(Path(root)).create("default")
        api: list[float] = []
        a2a: list[float] = []
        with (
            serve(create_app(Path(root), settings_for)) as base,
            httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
        ):
            session = http.post("/sessions", json={}).json()["id"]
            context = ""
            for i in range(n + 3):  # the first rounds warm both paths up
                start = time.perf_counter()
                _post(http, session, i)
                middle = time.perf_counter()
                context = _send(http, context, i)
                if i >= 3:
                    api.append(middle - start)
                    a2a.append(time.perf_counter() - middle)
        return api, a2a


def collect(n: int, words: int = 0) -> Results:
    text = " ".join(f"w{i}" for i in range(words)) if words else "hello from the scripted model"
    with FakeLLM([{"text": text}] * (2 * n + 10)) as model:
        api, a2a = round_trips(model.url, n)
    extra = (statistics.median(a2a) - statistics.median(api)) * 1000
    verdict = "met" if extra <= TARGET_MS else "NOT met"
    return {
        "a turn through POST /sessions/{id}/messages and its events": api,
        f"a task through A2A SendMessage — {added('added', api, a2a)} "
        f"(target <= {TARGET_MS:.0f} ms: {verdict})": a2a,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=100)
    parser.add_argument("--words", type=int, default=0, help="words of the reply (default: five)")
    args = parser.parse_args()
    figures = collect(args.iterations, args.words)
    extra = {"backend": "local", "words": args.words}
    report("A2A overhead", figures, Path(__file__).parent / "results", extra)
