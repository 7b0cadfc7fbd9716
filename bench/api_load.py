"""`python -m bench.api_load`: many API sessions at once, each several turns, against one API server
(the scripted model, the local backend). Prints figures, asserts nothing: turns done and failed, turn
latency (post to turn_end) median and p90, the server's peak RSS, its open descriptors after a warm-up
session, at peak and after every session closed, and the live sandboxes over time.

The server runs in its own process (`python -m bench.api_load serve ROOT MODEL_URL`), so its RSS and
descriptors are its own; each turn is one terminal call and a reply (two model calls).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from control_plane.models.fake_llm import FakeLLM
from control_plane.store.tokens import TokenStore

PROFILE = "bench"


def server_settings(root: Path, model_url: str, sessions: int) -> dict[str, Any]:
    """Limits raised to the load: the benchmark measures capacity, not the 429s (tests prove those)."""
    return {
        "root": root,
        "backend": "local",
        "model": {"name": "openai/scripted", "api_base": model_url, "api_key": "bench-key", "retries": 0},
        "limits": {"max_running_sessions": sessions, "max_sandboxes": sessions},
        "learning": {"enabled": False},
    }


def serve(root: Path, model_url: str, sessions: int) -> None:
    """The server process: binds 127.0.0.1 on a free port, prints it, serves until killed."""
    import socket

    import uvicorn

    from control_plane.api.app import create_app
    from control_plane.config.settings import load_settings

    overrides = server_settings(root, model_url, sessions)
    app = create_app(root, lambda name: load_settings(name, **overrides))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(256)  # connections wait in the backlog while the server starts
    print(sock.getsockname()[1], flush=True)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


class Sampler:
    """The server's RSS, open descriptors and live sandboxes, every 100 ms, in a thread."""

    def __init__(self, pid: int, sandboxes: Path) -> None:
        self.pid, self.sandboxes = pid, sandboxes
        self.samples: list[tuple[float, int, int, int]] = []  # (t, rss KiB, fds, sandboxes)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()

    def now(self) -> tuple[int, int, int]:
        status = Path(f"/proc/{self.pid}/status").read_text()
        rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        fds = len(os.listdir(f"/proc/{self.pid}/fd"))
        live = len(os.listdir(self.sandboxes)) if self.sandboxes.is_dir() else 0
        return rss, fds, live

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.samples.append((time.monotonic() - self.started, *self.now()))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def one_session(
    client: httpx.AsyncClient, turns: int, latencies: list[float], errors: list[str]
) -> str:
    created = await client.post("/sessions", json={"title": "load"})
    created.raise_for_status()
    session = created.json()["id"]
    for turn in range(turns):
        started = time.perf_counter()
        posted = await client.post(f"/sessions/{session}/messages", json={"content": f"turn {turn}"})
        if posted.status_code != 202:
            errors.append(f"{session} turn {turn}: {posted.status_code} {posted.text[:200]}")
            continue
        url = f"/sessions/{session}/events?after={posted.json()['after']}&until_turn_end=true"
        end: dict[str, Any] = {}
        async with client.stream("GET", url, timeout=300) as stream:
            async for line in stream.aiter_lines():
                if line.startswith("data: ") and '"turn_end"' in line:
                    end = json.loads(line[6:])
        latencies.append(time.perf_counter() - started)
        if end.get("reason") != "done":
            errors.append(f"{session} turn {turn}: ended {end.get('reason')!r}")
    return str(session)


async def drive(url: str, token: str, sessions: int, turns: int) -> tuple[list[float], list[str]]:
    latencies: list[float] = []
    errors: list[str] = []
    limits = httpx.Limits(max_connections=sessions * 2)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=60) as client:
        done = await asyncio.gather(
            *(one_session(client, turns, latencies, errors) for _ in range(sessions)), return_exceptions=True
        )
        ids = [d for d in done if isinstance(d, str)]
        errors += [f"session failed: {d!r}" for d in done if not isinstance(d, str)]
        await asyncio.gather(*(client.post(f"/sessions/{s}/close") for s in ids))
    return latencies, errors


def wait_for(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2, help="descriptors growing round over round = a leak")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hermetic-api-load-"))
    script = [{"tool_calls": [{"name": "terminal", "arguments": {"command": "echo load"}}]}, {"text": "ok"}]
    with FakeLLM(script * (args.sessions * args.turns * args.rounds + 1)) as model:
        token = TokenStore(root).create(PROFILE)
        server = subprocess.Popen(
            [sys.executable, "-m", "bench.api_load", "serve", str(root), model.url, str(args.sessions)],
            stdout=subprocess.PIPE,
            text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")},
        )
        try:
            assert server.stdout is not None
            url = f"http://127.0.0.1:{server.stdout.readline().strip()}"
            httpx.get(f"{url}/health", timeout=120).raise_for_status()
            asyncio.run(drive(url, token, 1, 1))  # opens what stays open: the profile, its database
            for round_ in range(1, args.rounds + 1):
                with Sampler(server.pid, root / "sandboxes") as sampler:
                    wait_for(lambda: sampler.now()[2] == 0, 60)
                    before = sampler.now()
                    started = time.perf_counter()
                    latencies, errors = asyncio.run(drive(url, token, args.sessions, args.turns))
                    elapsed = time.perf_counter() - started
                    wait_for(lambda: sampler.now()[2] == 0, 60)  # sandboxes close in the background
                    after = sampler.now()
                print(f"-- round {round_}")
                report(args, sampler, before, after, latencies, errors, elapsed)
        finally:
            server.terminate()
            server.wait(60)


def report(
    args: argparse.Namespace,
    sampler: Sampler,
    before: tuple[int, int, int],
    after: tuple[int, int, int],
    latencies: list[float],
    errors: list[str],
    elapsed: float,
) -> None:
    ms = sorted(x * 1000 for x in latencies)
    samples = sampler.samples or [(0.0, *before)]
    print(f"{args.sessions} sessions x {args.turns} turns in {elapsed:.1f} s (local backend, scripted model)")
    print(f"turns done: {len(ms)} of {args.sessions * args.turns}; errors: {len(errors)}")
    for error in errors[:10]:
        print(f"  {error}")
    if ms:
        p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
        print(f"turn latency: median {statistics.median(ms):.0f} ms, p90 {p90:.0f} ms, max {ms[-1]:.0f} ms")
    mib = [before[0] / 1024, max(s[1] for s in samples) / 1024, after[0] / 1024]
    print("server RSS: {:.0f} MiB before, peak {:.0f} MiB, {:.0f} MiB after".format(*mib))
    fds = (before[1], max(s[2] for s in samples), after[1])
    print("server open descriptors: {} before, peak {}, {} after every session closed".format(*fds))
    timeline: dict[int, int] = {}
    for t, _, _, live in samples:
        timeline[int(t)] = max(timeline.get(int(t), 0), live)
    print("live sandboxes per second (max): " + " ".join(f"{t}s:{n}" for t, n in sorted(timeline.items())))
    print(f"live sandboxes: peak {max(s[3] for s in samples)}, after close {after[2]}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    else:
        main()
