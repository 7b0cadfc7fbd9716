"""`python -m bench.replicas`: `hermetic serve` replicas on one PostgreSQL (tests/support/replica_set.py), the
scripted model, HAProxy in front. Prints figures, asserts nothing:

- turns per second with 1, 2 and 3 replicas: SESSIONS clients at once through HAProxy (random routing),
  each posting TURNS messages and following its events to each turn's end (one instant model reply each);
- the added latency of a request that lands on a non-owner replica (GET /sessions/ID/questions, the
  cheapest forwarded route): median on a non-owner minus median on the owner;
- the same for an MCP session's tool call (`terminal` running `true`, the official `mcp` SDK as the
  client, 2025-11-25 sessions): the session opened on one replica, its calls sent there or to another;
- take-over time after a SIGKILL: from the kill of the replica running a turn to the turn_end
  (interrupted) a follower on another replica receives, with the default lease (api.lease_seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import httpx2
from haproxy import start_haproxy
from hermetic_cli import scripted_env
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from ngircd import free_port
from postgres import LocalPostgres, start_postgres
from replica_set import ReplicaProcess, replica_env, start_replicas, token_for, until
from sse_events import events_of

from control_plane.models.fake_llm import FakeLLM


def _turns(base: str, headers: dict[str, str], sessions: int, turns: int) -> float:
    """Turns per second: `sessions` clients at once, each `turns` messages, each followed to its end."""

    def client(done: list[int]) -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=120) as http:
            session = http.post("/sessions", json={}).json()["id"]
            last = 0
            for n in range(turns):
                http.post(f"/sessions/{session}/messages", json={"content": f"turn {n}"}).raise_for_status()
                url = f"/sessions/{session}/events?after={last}&until_turn_end=true"
                with http.stream("GET", url) as response:
                    for event in events_of(response):
                        last = event["id"]
                done.append(1)

    done: list[int] = []
    threads = [threading.Thread(target=client, args=(done,)) for _ in range(sessions)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return len(done) / (time.perf_counter() - start)


def _forwarding(replicas: list[ReplicaProcess], headers: dict[str, str], n: int) -> tuple[float, float]:
    """Median ms of one forwarded route on the session's owner and on a non-owner."""
    with httpx.Client(headers=headers, timeout=60) as http:
        session = http.post(f"{replicas[0].url}/sessions", json={}).json()["id"]  # owned by replica 0

        def median(url: str) -> float:
            samples = []
            for _ in range(n):
                start = time.perf_counter()
                http.get(url).raise_for_status()
                samples.append((time.perf_counter() - start) * 1000)
            return statistics.median(samples)

        median(f"{replicas[1].url}/sessions/{session}/questions")  # warm both paths' connections
        owner = median(f"{replicas[0].url}/sessions/{session}/questions")
        other = median(f"{replicas[1].url}/sessions/{session}/questions")
    return owner, other


class _Pinned(httpx2.AsyncBaseTransport):
    """The MCP client's first request (initialize: the session opens there) to `first`, the rest to `rest`."""

    def __init__(self, first: int, rest: int) -> None:
        self.ports, self.inner = [first], httpx2.AsyncHTTPTransport()
        self.rest = rest

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(port=self.ports.pop() if self.ports else self.rest)
        return await self.inner.handle_async_request(request)


def _mcp_forwarding(replicas: list[ReplicaProcess], headers: dict[str, str], n: int) -> tuple[float, float]:
    """Median ms of an MCP tool call on the session's replica and through another replica."""

    async def median(rest: int) -> float:
        transport = _Pinned(replicas[0].port, replicas[rest].port)
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60, transport=transport) as http,
            McpClient(
                streamable_http_client(f"{replicas[0].url}/mcp", http_client=http), mode="legacy"
            ) as mcp,
        ):
            await mcp.call_tool("terminal", {"command": "true"})  # the sandbox, the connections
            samples = []
            for _ in range(n):
                start = time.perf_counter()
                await mcp.call_tool("terminal", {"command": "true"})
                samples.append((time.perf_counter() - start) * 1000)
        return statistics.median(samples)

    return asyncio.run(median(0)), asyncio.run(median(1))


def _take_over(replicas: list[ReplicaProcess], headers: dict[str, str], model: FakeLLM) -> float:
    """Seconds from the SIGKILL of a turn's replica to its interrupted turn_end on another replica."""
    model.load([{"text": "never", "delay": 600, "match": "take-over"}])
    ended: list[float] = []
    with httpx.Client(headers=headers, timeout=120) as http:
        session = http.post(f"{replicas[0].url}/sessions", json={}).json()["id"]
        opened = threading.Event()

        def follow() -> None:
            url = f"{replicas[1].url}/sessions/{session}/events?after=0&until_turn_end=true"
            with httpx.stream("GET", url, headers=headers, timeout=120) as response:
                opened.set()
                for event in events_of(response):
                    if event["event"] == "turn_end":
                        ended.append(time.perf_counter())

        follower = threading.Thread(target=follow)
        follower.start()
        opened.wait(60)
        http.post(f"{replicas[0].url}/sessions/{session}/messages", json={"content": "take-over"})
        until(lambda: len(model.requests) == 1, "the turn's model call")
        killed = time.perf_counter()
        replicas[0].kill()
        follower.join(120)
    return ended[0] - killed


def _round(postgres: LocalPostgres, model: FakeLLM, count: int, args: argparse.Namespace) -> dict[str, float]:
    """The figures with `count` replicas on a fresh database and profile home."""
    results: dict[str, float] = {}
    database = postgres.create_database()
    with tempfile.TemporaryDirectory() as root:
        headers = {"Authorization": f"Bearer {token_for(Path(root))}"}
        env = replica_env(scripted_env(Path(root), model.url), postgres.url(database))
        env.pop("HERMETIC_API__LEASE_SECONDS")  # the default lease: the take-over a user gets
        model.load([{"text": "ok"}] * (args.sessions * args.turns))
        replicas = start_replicas(env, [free_port() for _ in range(count)])
        proxy = start_haproxy(free_port(), [replica.port for replica in replicas])
        try:
            proxy.wait_serving()
            results[f"turns/s, {count} replica(s)"] = _turns(proxy.url, headers, args.sessions, args.turns)
            if count == 3:
                owner, other = _forwarding(replicas, headers, args.requests)
                results["owner request, median ms"] = owner
                results["non-owner request, median ms"] = other
                results["added by forwarding, ms (target <= 5)"] = other - owner
                owner, other = _mcp_forwarding(replicas, headers, args.requests // 3)
                results["MCP tool call on its replica, median ms"] = owner
                results["MCP tool call through another, median ms"] = other
                results["take-over after SIGKILL, s (target <= 10)"] = _take_over(replicas, headers, model)
        finally:
            proxy.stop()
            for replica in replicas:
                replica.stop()
    postgres.drop_database(database)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300, help="samples per forwarding median")
    args = parser.parse_args()
    postgres = start_postgres()
    model = FakeLLM([]).start()
    results: dict[str, float] = {}
    try:
        for count in (1, 2, 3):
            results |= _round(postgres, model, count, args)
    finally:
        model.stop()
        postgres.stop()
    print(f"{args.sessions} sessions x {args.turns} turns, scripted model, one PostgreSQL, HAProxy (random)")
    for name, value in results.items():
        print(f"  {name:45} {value:8.2f}")


if __name__ == "__main__":
    main()
