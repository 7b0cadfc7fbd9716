"""The surfaces beside the session routes, on three replicas of one PostgreSQL database: memory and
skill-library writes under the profile's advisory lock; MCP over streamable HTTP, each session served by
the replica that opened it from any replica (the official `mcp` SDK); A2A tasks in the database, a task's
follow-ups reaching the replica running its session (the a2a-sdk's client); the terminal WebSocket relayed
to the session's replica."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import psycopg
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_message_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Task,
    TaskState,
)
from a2a_calls import message, send
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from postgres import LocalPostgres
from replica_set import Cluster, running_cluster, until
from websockets.sync.client import ClientConnection, connect

from control_plane.api.signins import COOKIE, CSRF_HEADER
from control_plane.store.profile_lock import advisory_key


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, postgres: LocalPostgres) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("surfaces"), postgres) as started:
        yield started


def _add(cluster: Cluster, index: int, text: str) -> int:
    with cluster.client(index) as client:
        body = {"ops": [{"op": "add", "text": text}]}
        return client.post("/memory/memory", json=body).status_code


def _entries(cluster: Cluster) -> list[str]:
    with cluster.client(2) as client:
        files = client.get("/memory").json()["files"]
    return [entry["text"] for file in files if file["target"] == "memory" for entry in file["entries"]]


def test_memory_writes_through_two_replicas_at_once_lose_nothing(cluster: Cluster) -> None:
    texts = [f"replica {n % 2} noted fact number {n}." for n in range(16)]
    codes: list[int] = []
    writers = [
        threading.Thread(target=lambda n=n: codes.append(_add(cluster, n % 2, texts[n]))) for n in range(16)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(120)
    assert codes == [200] * 16
    assert set(texts) <= set(_entries(cluster))


def _waiting_on(conn: psycopg.Connection, key: int) -> bool:
    """Whether another backend waits for the advisory lock `key` (pg_locks splits it in two halves)."""
    unsigned = key & 0xFFFFFFFFFFFFFFFF
    row = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
        (unsigned >> 32, unsigned & 0xFFFFFFFF),
    ).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize(
    ("what", "write"),
    [
        (
            "memory",
            lambda client: client.post("/memory/memory", json={"ops": [{"op": "add", "text": "held."}]}),
        ),
        ("skills", lambda client: client.post("/skills/curation/apply", json={"changes": []})),
    ],
    ids=["memory", "skills"],
)
def test_a_write_waits_for_the_profiles_advisory_lock(
    cluster: Cluster, what: str, write: Callable[[httpx.Client], httpx.Response]
) -> None:
    key = advisory_key("default", what)
    answered: list[httpx.Response] = []
    with psycopg.connect(
        cluster.database.replace("postgresql+psycopg", "postgresql"), autocommit=True
    ) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))  # as another replica in its write
        with cluster.client(1) as client:
            writer = threading.Thread(target=lambda: answered.append(write(client)))
            writer.start()
            until(lambda: _waiting_on(conn, key), f"the {what} write to wait for the lock")
            assert not answered
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            writer.join(60)
    assert [response.status_code for response in answered] == [200]
    if what == "memory":
        assert "held." in _entries(cluster)


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
    return [str(row[0]) for row in cluster.sql("SELECT owner FROM mcp_sessions")]


async def _session(cluster: Cluster, order: list[int], work: Any) -> Any:
    transport = Alternating([cluster.replicas[index].port for index in order])
    base = cluster.replicas[order[0]].url
    async with (
        httpx2.AsyncClient(headers=cluster.headers, timeout=60, transport=transport) as http,
        McpClient(streamable_http_client(f"{base}/mcp", http_client=http), mode="legacy") as client,
    ):
        return await work(client, transport)


def test_an_mcp_session_is_served_by_its_replica_from_any_replica_and_ends_with_it(cluster: Cluster) -> None:
    owner = cluster.replicas[2]  # the session's first request (initialize) lands there
    assert owner.proc is not None
    pid = owner.proc.pid

    async def kept(client: McpClient, transport: Alternating) -> list[str]:
        await client.call_tool("terminal", {"command": "export KEPT=in-one-sandbox"})
        echoed = [text(await client.call_tool("terminal", {"command": "echo $KEPT"})) for _ in range(3)]
        assert len(set(transport.sent)) == len(
            set(transport.order)
        )  # every replica was sent some of the session's requests
        return echoed

    assert all("in-one-sandbox" in said for said in asyncio.run(_session(cluster, [2, 0, 1], kept)))

    async def cut_off(client: McpClient, transport: Alternating) -> str:
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


@asynccontextmanager
async def a2a_client(cluster: Cluster, index: int, streaming: bool = False) -> AsyncIterator[Client]:
    async with httpx.AsyncClient(headers=cluster.headers, timeout=60) as http:
        config = ClientConfig(httpx_client=http, streaming=streaming)
        yield await ClientFactory(config).create_from_url(cluster.replicas[index].url)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


def test_a_tasks_answer_get_and_cancel_reach_its_sessions_replica_from_another(cluster: Cluster) -> None:
    cluster.model.load(
        [
            {
                "tool_calls": [
                    {"name": "clarify", "arguments": {"question": "Which?", "choices": ["red", "blue"]}}
                ],
                "match": "<a2a-asked>",
            },
            {"text": "blue it is", "match": "<a2a-asked>"},
            {"text": "never sent", "delay": 300, "match": "<a2a-cancel>"},
        ]
    )

    async def asked_and_answered() -> tuple[Task, Task, Task]:
        async with a2a_client(cluster, 0) as first, a2a_client(cluster, 1) as second:
            asked = await send(first, message("<a2a-asked> pick a colour"))  # its session: on replica 0
            done = await send(second, message("blue", asked))  # the answer, sent to replica 1
            got = await second.get_task(GetTaskRequest(id=asked.id))
        return asked, done, got

    asked, done, got = run(asked_and_answered())
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert done.status.state == TaskState.TASK_STATE_COMPLETED and done.id == asked.id
    assert get_message_text(done.status.message) == "blue it is"
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert cluster.model.requests[-1]["messages"][-1]["content"] == "the user answered: blue"

    async def canceled_elsewhere() -> tuple[Task, Task, str]:
        async with a2a_client(cluster, 0, streaming=True) as first, a2a_client(cluster, 1) as second:
            stream = first.send_message(message("<a2a-cancel> take your time"))
            task_id = ""
            async for response in stream:
                if response.HasField("task"):
                    task_id = response.task.id
                    break
            await asyncio.to_thread(cluster.model.wait_requests, 3)  # the turn waits for the model
            canceled = await second.cancel_task(CancelTaskRequest(id=task_id))
            await stream.aclose()
            got = await second.get_task(GetTaskRequest(id=task_id))
        return canceled, got, _session_of(cluster, got.context_id)

    canceled, got, session = run(canceled_elsewhere())
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert got.status.state == TaskState.TASK_STATE_CANCELED
    assert cluster.history(1, session)["running"] is False  # the run itself was interrupted, on its replica


def test_a_task_whose_replica_dies_mid_turn_fails_with_the_reason_on_the_others(cluster: Cluster) -> None:
    cluster.model.load([{"text": "never sent", "delay": 300, "match": "<a2a-cut-off>"}])
    asked = len(cluster.model.requests)
    killed: list[int] = []

    async def started() -> Task:
        async with a2a_client(cluster, 2, streaming=True) as client:
            stream = client.send_message(message("<a2a-cut-off> take your time"))
            async for response in stream:
                if response.HasField("task"):
                    task = response.task
                    break
            await asyncio.to_thread(cluster.model.wait_requests, asked + 1)  # the turn waits for the model
            session = _session_of(cluster, task.context_id)
            [owner] = [n for n, r in enumerate(cluster.replicas) if session in cluster.sessions_held_by(r)]
            killed.append(owner)
            cluster.replicas[owner].kill()  # its run, its lease and its task's updates die with it
            with contextlib.suppress(Exception):
                await stream.aclose()
        return task

    async def state(task_id: str, index: int) -> Task:
        async with a2a_client(cluster, index) as client:
            return await client.get_task(GetTaskRequest(id=task_id))

    try:
        task = run(started())
        other = (killed[0] + 1) % len(cluster.replicas)
        # another replica takes the lapsed turn over (after the lease's length) and ends the task
        failed = TaskState.TASK_STATE_FAILED
        until(lambda: run(state(task.id, other)).status.state == failed, "the task's end")
        ended = run(state(task.id, other))
        assert "stopped before it ended" in get_message_text(ended.status.message)
        assert cluster.history(other, _session_of(cluster, task.context_id))["running"] is False
    finally:
        for index in killed:
            cluster.replicas[index].start().wait_healthy()


def _session_of(cluster: Cluster, context_id: str) -> str:
    [(session,)] = cluster.sql(
        "SELECT session_id FROM conversation_bindings WHERE surface = 'a2a' AND key = %s", context_id
    )
    return str(session)


def _until_output(socket: ClientConnection, marker: bytes) -> bytes:
    seen = b""
    while marker not in seen:
        frame = socket.recv(timeout=60)
        assert isinstance(frame, bytes), frame  # no error message on the way
        seen += frame
    return seen


def test_a_sessions_terminal_is_relayed_to_the_replica_holding_it(cluster: Cluster) -> None:
    session = cluster.new_session(1)  # replica 1 holds it, and will hold its sandbox
    landed = cluster.replicas[0].url
    with httpx.Client(base_url=landed) as web:  # a console sign-in on replica 0
        token = cluster.headers["Authorization"].removeprefix("Bearer ")
        signin = web.post("/auth/login", json={"token": token}).raise_for_status().json()
        cookie = web.cookies[COOKIE]
        sent = {"Origin": landed, CSRF_HEADER: signin["csrf_token"]}
        assert web.post(f"/sessions/{session}/interrupt", headers=sent).json() == {"interrupted": False}
    path = f"/sessions/{session}/terminal"
    signed_in = {"Cookie": f"{COOKIE}={cookie}", "Origin": landed}
    with connect(landed.replace("http", "ws") + path, additional_headers=signed_in) as socket:
        opened = json.loads(socket.recv(timeout=60))
        assert opened["type"] == "terminal" and not opened["attached"], opened
        socket.send(json.dumps({"type": "input", "data": "echo kept-$((6 * 7))\r"}))
        _until_output(socket, b"kept-42")
    assert session in cluster.sessions_held_by(cluster.replicas[1])  # never taken by the relaying replica

    again = cluster.replicas[2].url.replace("http", "ws") + f"{path}?terminal={opened['id']}"
    with connect(again, additional_headers=cluster.headers) as socket:
        attached = json.loads(socket.recv(timeout=60))
        assert attached["type"] == "terminal" and attached["attached"], (attached, _told(cluster, session))
        _until_output(socket, b"kept-42")  # the running terminal's kept output, replayed
        socket.send(json.dumps({"type": "input", "data": "exit 3\r"}))
        while isinstance(frame := socket.recv(timeout=60), bytes):
            pass
        assert json.loads(frame) == {"type": "exit", "exit_code": 3}


def _told(cluster: Cluster, session: str) -> str:
    """Who holds the session now, and what the replicas logged last (a failure's context)."""
    holders = [n for n, held in enumerate(cluster.replicas) if session in cluster.sessions_held_by(held)]
    logs = "".join(f"--- replica {n}:\n" + "".join(r.said[-15:]) for n, r in enumerate(cluster.replicas))
    return f"held by replica {holders}\n{logs}"
