"""A2A on replicas, the a2a-sdk's client on two replicas: tasks are in the database, and a task's follow-up
requests (the answer its question waits for, get, cancel) reach the replica running its session from
whichever replica they land on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import psycopg
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_message_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Task,
    TaskState,
)
from a2a_calls import message, send
from replica_set import Cluster


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


def _session_of(cluster: Cluster, context_id: str) -> str:
    with psycopg.connect(cluster.database.replace("postgresql+psycopg", "postgresql")) as conn:
        row = conn.execute(
            "SELECT session_id FROM conversation_bindings WHERE surface = 'a2a' AND key = %s", (context_id,)
        ).fetchone()
    assert row is not None
    return str(row[0])
