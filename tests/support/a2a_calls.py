"""The a2a-sdk client's requests the A2A tests send: a user's message (new, or the next of a task or
context) and a message sent without streaming."""

from __future__ import annotations

import uuid

from a2a.client import Client
from a2a.types import Message, Part, Role, SendMessageRequest, Task


def message(text: str, task: Task | None = None, context_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(
            role=Role.ROLE_USER,
            message_id=uuid.uuid4().hex,
            parts=[Part(text=text)],
            task_id=task.id if task else "",
            context_id=task.context_id if task else context_id,
        )
    )


async def send(client: Client, request: SendMessageRequest) -> Task:
    """A message sent without streaming: the task as it is when it ends or needs input."""
    [response] = [response async for response in client.send_message(request)]
    assert response.HasField("task")
    return response.task
