"""Hermetic as an A2A client: a task sent to another agent by its base URL (its card read from the
well-known path, the SDK's client on the JSON-RPC interface it names), followed to its end as a stream,
or stopped: then the remote task is canceled. `hermetic a2a call` and the delegate_remote tool use it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text
from a2a.types import (
    AgentCard,
    Artifact,
    CancelTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from a2a.utils.errors import A2AError

from ..tls import client_tls

STATE_PREFIX = "TASK_STATE_"
NAMED_WAIT = 10.0
"""Seconds a stop waits for the stream's first answer when it came before: without the task's id
there is nothing to cancel."""


class RemoteAgentError(RuntimeError):
    """The remote agent could not be reached, refused the call, or answered with an A2A error."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status of a refusal (401: the token), when there was one."""


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
    files: dict[str, bytes] = field(default_factory=dict)
    """The files the task sent (FileParts with their bytes), by the name it gave each."""
    stopped: bool = False
    """The caller stopped following before the task ended (and canceled it)."""


async def call_agent(
    url: str,
    text: str,
    *,
    token: str | None = None,
    context_id: str = "",
    task_id: str = "",
    on_progress: Callable[[str], None] | None = None,
    timeout: float = 600.0,
    stop: asyncio.Event | None = None,
) -> RemoteOutcome:
    """Send `text` to the agent at `url` (in a context or to a task waiting for input, when given) and
    follow the task; `on_progress` gets each working status line. When `stop` is set first, the task is
    canceled (CancelTask) and the outcome is `stopped`. Raises RemoteAgentError."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    message = Message(
        role=Role.ROLE_USER,
        message_id=uuid.uuid4().hex,
        parts=[Part(text=text)],
        context_id=context_id,
        task_id=task_id,
    )
    outcome = RemoteOutcome(task_id=task_id, context_id=context_id)
    named = asyncio.Event()
    try:
        async with httpx.AsyncClient(headers=headers, timeout=timeout, verify=client_tls()) as http:
            card = await A2ACardResolver(http, url).get_agent_card()
            _same_origin(card, url)
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)

            async def follow() -> None:
                async for response in client.send_message(SendMessageRequest(message=message)):
                    _follow(outcome, response, on_progress)
                    if outcome.task_id:
                        named.set()

            following = asyncio.ensure_future(follow())
            if stop is not None and not await _first(following, stop.wait()):
                await _first(following, named.wait(), NAMED_WAIT)  # to learn the task's id
                await _cancel(client, following, outcome)
            if not following.cancelled():
                await following  # its end, or its error
    except ValueError as exc:  # the card names no interface this client speaks
        raise RemoteAgentError(f"{url}: {exc}") from None
    except (A2AError, httpx.HTTPError) as exc:
        refusal = exc if isinstance(exc, httpx.HTTPStatusError) else exc.__cause__
        status = refusal.response.status_code if isinstance(refusal, httpx.HTTPStatusError) else None
        raise RemoteAgentError(f"{url}: {type(exc).__name__}: {exc}", status) from None
    return outcome


def _same_origin(card: AgentCard, url: str) -> None:
    """Keep only the card's interfaces at `url`'s scheme, host and port: the token goes to the agent the
    caller named (an allowlisted URL), never where a card points. Raises RemoteAgentError."""
    origin = urlsplit(url)[:2]
    elsewhere = [i.url for i in card.supported_interfaces if urlsplit(i.url)[:2] != origin]
    kept = [i for i in card.supported_interfaces if i.url not in elsewhere]
    if not kept:
        where = ", ".join(elsewhere)
        raise RemoteAgentError(f"{url}: its card names interfaces only elsewhere ({where}): not called")
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(kept)


async def _first(work: asyncio.Future[None], other: Any, timeout: float | None = None) -> bool:
    """Wait for `work` or the coroutine `other` (or `timeout`); whether `work` is done."""
    waiting = asyncio.ensure_future(other)
    await asyncio.wait({work, waiting}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    return work.done()


async def _cancel(client: Client, following: asyncio.Future[None], outcome: RemoteOutcome) -> None:
    """Stop following the task and cancel it over there; the outcome says where it ended."""
    if following.done():  # it ended while the id was awaited
        return
    following.cancel()
    await asyncio.gather(following, return_exceptions=True)
    outcome.stopped = True
    if not outcome.task_id:
        outcome.state, outcome.message = "unknown", "the remote agent had not named its task: not canceled"
        return
    try:
        task = await client.cancel_task(CancelTaskRequest(id=outcome.task_id))
    except A2AError as exc:  # it ended meanwhile (not cancelable), or is gone
        outcome.message = f"the cancel was refused: {type(exc).__name__}: {exc}"
        return
    outcome.state = _state(task.status.state)
    outcome.message = get_message_text(task.status.message) or outcome.message


def _follow(
    outcome: RemoteOutcome, response: StreamResponse, on_progress: Callable[[str], None] | None
) -> None:
    if response.HasField("task"):
        task = response.task
        outcome.task_id, outcome.context_id = task.id, task.context_id
        outcome.state = _state(task.status.state)
        outcome.message = get_message_text(task.status.message) or outcome.message
        outcome.artifacts.update({a.artifact_id: get_artifact_text(a, "") for a in task.artifacts})
        for artifact in task.artifacts:
            _files(outcome, artifact)
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
        _files(outcome, artifact)
    elif response.HasField("message"):  # an agent that answers without a task
        outcome.state, outcome.message = "completed", get_message_text(response.message)


def _files(outcome: RemoteOutcome, artifact: Artifact) -> None:
    for part in artifact.parts:
        if part.WhichOneof("content") == "raw":
            outcome.files[part.filename or artifact.name or artifact.artifact_id] = part.raw


def _state(state: TaskState) -> str:
    return TaskState.Name(state).removeprefix(STATE_PREFIX).lower()
