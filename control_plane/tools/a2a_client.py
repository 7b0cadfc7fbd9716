"""Hermetic as an A2A client: a task sent to another agent by its base URL (its card read from the
well-known path, the SDK's client on the JSON-RPC interface it names), followed to its end as a stream."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse, TaskState
from a2a.utils.errors import A2AError

STATE_PREFIX = "TASK_STATE_"


class RemoteAgentError(RuntimeError):
    """The remote agent could not be reached, refused the call, or answered with an A2A error."""


@dataclass
class RemoteOutcome:
    """Where a remote task stands when its stream ends."""

    task_id: str = ""
    context_id: str = ""
    state: str = "unknown"
    """completed, input_required, canceled, failed, rejected, ... (A2A's task states, in lower case)."""
    message: str = ""
    """The last status message: the answer when completed, the question when input is required."""
    artifacts: dict[str, str] = field(default_factory=dict)
    """The text of each artifact by id (Hermetic's `reply` holds all the agent wrote)."""


async def call_agent(
    url: str,
    text: str,
    *,
    token: str | None = None,
    context_id: str = "",
    task_id: str = "",
    on_progress: Callable[[str], None] | None = None,
    timeout: float = 600.0,
) -> RemoteOutcome:
    """Send `text` to the agent at `url` (in a context or to a task waiting for input, when given) and
    follow the task; `on_progress` gets each working status line. Raises RemoteAgentError."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    message = Message(
        role=Role.ROLE_USER,
        message_id=uuid.uuid4().hex,
        parts=[Part(text=text)],
        context_id=context_id,
        task_id=task_id,
    )
    outcome = RemoteOutcome(task_id=task_id, context_id=context_id)
    try:
        async with httpx.AsyncClient(headers=headers, timeout=timeout) as http:
            factory = ClientFactory(ClientConfig(httpx_client=http, streaming=True))
            client = await factory.create_from_url(url)
            async for response in client.send_message(SendMessageRequest(message=message)):
                _follow(outcome, response, on_progress)
    except (A2AError, httpx.HTTPError) as exc:
        raise RemoteAgentError(f"{url}: {type(exc).__name__}: {exc}") from None
    return outcome


def _follow(
    outcome: RemoteOutcome, response: StreamResponse, on_progress: Callable[[str], None] | None
) -> None:
    if response.HasField("task"):
        task = response.task
        outcome.task_id, outcome.context_id = task.id, task.context_id
        outcome.state = _state(task.status.state)
        outcome.message = get_message_text(task.status.message) or outcome.message
        outcome.artifacts.update({a.artifact_id: get_artifact_text(a, "") for a in task.artifacts})
    elif response.HasField("status_update"):
        update = response.status_update
        outcome.state = _state(update.status.state)
        line = get_message_text(update.status.message)
        outcome.message = line or outcome.message
        if line and on_progress is not None and update.status.state == TaskState.TASK_STATE_WORKING:
            on_progress(line)
    elif response.HasField("artifact_update"):
        artifact = response.artifact_update.artifact
        before = outcome.artifacts.get(artifact.artifact_id, "") if response.artifact_update.append else ""
        outcome.artifacts[artifact.artifact_id] = before + get_artifact_text(artifact, "")
    elif response.HasField("message"):  # an agent that answers without a task
        outcome.state, outcome.message = "completed", get_message_text(response.message)


def _state(state: TaskState) -> str:
    return TaskState.Name(state).removeprefix(STATE_PREFIX).lower()
