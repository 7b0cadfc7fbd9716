"""MCP over streamable HTTP on replicas (`/mcp` of `hermetic serve`), the official `mcp` SDK as the client
with each of its HTTP requests sent to the next replica in turn: a session (Mcp-Session-Id) is served by
the replica that opened it, whichever replica a request lands on; when that replica dies the session is
gone (404, "Session not found"), and a new session works on the replicas left."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import httpx2
import psycopg
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from replica_set import Cluster


class Alternating(httpx2.AsyncBaseTransport):
    """Each request to the next port in turn: no two requests of a session in a row on one replica."""

    def __init__(self, ports: list[int]) -> None:
        self.order = ports
        self.ports = itertools.cycle(ports)
        self.inner = httpx2.AsyncHTTPTransport()
        self.sent: list[int] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = next(self.ports)
        self.sent.append(port)
        request.url = request.url.copy_with(port=port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def text(result: Any) -> str:
    return "".join(block.text for block in result.content)


def _owners(cluster: Cluster) -> list[str]:
    with psycopg.connect(cluster.database.replace("postgresql+psycopg", "postgresql")) as conn:
        return [str(row[0]) for row in conn.execute("SELECT owner FROM mcp_sessions").fetchall()]


async def _session(cluster: Cluster, order: list[int], work: Any) -> Any:
    transport = Alternating([cluster.replicas[index].port for index in order])
    base = cluster.replicas[order[0]].url
    async with (
        httpx2.AsyncClient(headers=cluster.headers, timeout=60, transport=transport) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http), mode="legacy") as client,
    ):
        return await work(client, transport)


def test_an_mcp_session_is_served_by_its_replica_from_any_replica_and_ends_with_it(cluster: Cluster) -> None:
    owner = cluster.replicas[2]  # the session's first request (initialize) lands there
    assert owner.proc is not None
    pid = owner.proc.pid

    async def kept(client: Client, transport: Alternating) -> list[str]:
        await client.call_tool("terminal", {"command": "export KEPT=in-one-sandbox"})
        echoed = [text(await client.call_tool("terminal", {"command": "echo $KEPT"})) for _ in range(3)]
        assert len(set(transport.sent)) == len(
            set(transport.order)
        )  # every replica was sent some of the session's requests
        return echoed

    assert all("in-one-sandbox" in said for said in asyncio.run(_session(cluster, [2, 0, 1], kept)))

    async def cut_off(client: Client, transport: Alternating) -> str:
        await client.call_tool("terminal", {"command": "true"})
        assert any(f":{pid}:" in row for row in _owners(cluster))  # recorded as the owner's
        owner.kill()
        try:
            await client.call_tool("terminal", {"command": "true"})
        except MCPError as exc:
            return str(exc)
        return "answered"

    try:
        assert "Session not found" in asyncio.run(_session(cluster, [2, 0, 1], cut_off))
        again = asyncio.run(_session(cluster, [0, 1], kept))  # a new session, on the replicas left
        assert all("in-one-sandbox" in said for said in again)
    finally:
        owner.start().wait_healthy()
