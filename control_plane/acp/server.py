"""`hermetic acp`: the agent for editors over the Agent Client Protocol (stdio, the `agent-client-protocol`
SDK). A thin translator: an ACP session is a Hermetic session (same id), its prompts are turns of the
Conversation, the run's events become `session/update`s (updates.py) and its questions (approvals,
clarify) `session/request_permission`s (permissions.py).

The editor's working directory is the session's sandbox workspace, mounted read-write: local and
docker (dockerd on this machine) bind-mount it; ssh and modal sandboxes live elsewhere and cannot, so
`session/new` is refused there with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from acp import PROTOCOL_VERSION, Client, RequestError, update_agent_message_text, update_user_message_text
from acp.helpers import SessionUpdate, update_available_commands
from acp.schema import (
    AgentCapabilities,
    AvailableCommand,
    AvailableCommandInput,
    ClientCapabilities,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SessionCapabilities,
    SessionInfo,
    SessionListCapabilities,
    UnstructuredCommandInput,
)

from backends import SandboxError

from .. import __version__
from ..agent.agent import Agent
from ..agent.commands import HELP, run_command
from ..agent.loop import Busy, Conversation
from ..events import Event, Question
from .editor_files import EditorFiles
from .permissions import ask_editor
from .prompt import prompt_text
from .updates import Updates

log = logging.getLogger(__name__)
BIND_BACKENDS = ("local", "docker")
"""Backends that can mount a directory of this machine as the workspace."""
SESSION_COMMANDS = ("/new", "/stop")
"""Not advertised: the editor starts new threads (session/new) and stops runs (session/cancel)."""
LIST_PAGE = 50
"""Sessions per session/list page."""
STOP = {"done": "end_turn", "interrupted": "cancelled", "budget": "max_turn_requests", "error": "end_turn"}


@dataclass
class _Session:
    conversation: Conversation
    workspace: Path
    asks: set[asyncio.Task[None]] = field(default_factory=set)


class HermeticAcp:
    """The ACP agent side: one per `hermetic acp` process, any number of sessions."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.client: Client | None = None
        self.client_capabilities = ClientCapabilities()
        self.sessions: dict[str, _Session] = {}
        self._pending: set[asyncio.Future[None]] = set()

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        client_info: Implementation | None = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        self.client_capabilities = client_capabilities or ClientCapabilities()
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                session_capabilities=SessionCapabilities(list=SessionListCapabilities()),
                prompt_capabilities=PromptCapabilities(image=True, embedded_context=True),
            ),
            agent_info=Implementation(name="hermetic", title="Hermetic", version=__version__),
            auth_methods=[],
        )

    async def new_session(
        self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> NewSessionResponse:
        workspace = await self._workspace(cwd)
        conversation = await asyncio.to_thread(self.agent.new_conversation, source="acp")
        await self._open(conversation, workspace)
        return NewSessionResponse(session_id=conversation.id)

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> LoadSessionResponse:
        """A past session (any surface's) resumed: its conversation is replayed to the editor first."""
        workspace = await self._workspace(cwd)
        try:
            conversation = await asyncio.to_thread(self.agent.resume, session_id)
        except KeyError:
            raise RequestError.invalid_params(
                {"sessionId": f"no session {session_id} in this profile"}
            ) from None
        await self._open(conversation, workspace)
        for update in _replay(conversation.history):
            await self._send(session_id, update)
        return LoadSessionResponse()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._session(session_id)
        conversation = session.conversation
        text = prompt_text(prompt, session.workspace, self.agent.settings.sandbox.workdir)
        command = text.strip()
        if command.startswith("/") and command.split(maxsplit=1)[0] not in SESSION_COMMANDS:
            done = await asyncio.to_thread(run_command, self.agent, conversation, command, source="acp")
            if done is not None:
                await self._send(session_id, update_agent_message_text(done.text))
                return PromptResponse(stop_reason="end_turn")
        updates = Updates(session.workspace, self.agent.settings.sandbox.workdir)
        queue: asyncio.Queue[SessionUpdate | tuple[Question, str] | None] = asyncio.Queue()

        def emit(event: Event) -> None:  # on this loop, in order; translated now (a diff reads the file now)
            if isinstance(event, Question) and not event.delegate_call:
                queue.put_nowait((event, updates.asking_call() or f"question-{event.id}"))
            for update in updates.of(event):
                queue.put_nowait(update)

        sender = asyncio.create_task(self._drain(session, queue))
        try:
            end = await conversation.run(text, emit)
        except Busy as exc:
            raise RequestError.invalid_request({"sessionId": str(exc)}) from None
        finally:
            queue.put_nowait(None)
            await sender
            for ask in list(session.asks):
                ask.cancel()
        return PromptResponse(stop_reason=STOP[end.reason])  # type: ignore[arg-type]

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """session/cancel: the run stops (its model call, its sandbox commands, its open questions)."""
        session = self.sessions.get(session_id)
        if session is not None:
            session.conversation.interrupt()

    def close(self) -> None:
        for session in self.sessions.values():
            session.conversation.close()

    # -- the parts --------------------------------------------------------------------------

    async def _workspace(self, cwd: str) -> Path:
        path = Path(cwd)
        if not path.is_absolute() or not path.is_dir():
            raise RequestError.invalid_params({"cwd": f"{cwd!r} is not an absolute path to a directory"})
        try:
            backend = await asyncio.to_thread(lambda: self.agent.sandboxes.backend.name)
        except SandboxError as exc:  # BackendUnavailable among them: no sandbox can start
            raise RequestError.internal_error({"backend": str(exc)}) from None
        if backend not in BIND_BACKENDS:
            raise RequestError.invalid_params(
                {
                    "cwd": f"the {backend} backend runs sandboxes on another machine and cannot mount the "
                    "editor's directory; use the local or docker backend for editor sessions"
                }
            )
        return path.resolve()

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> ListSessionsResponse:
        """The profile's sessions opened from an editor (they have a workspace), latest first; `cwd`
        keeps those of that directory. The cursor is the offset of the next page."""
        offset = int(cursor) if cursor and cursor.isdigit() and len(cursor) < 10 else None
        if cursor is not None and offset is None:
            raise RequestError.invalid_params({"cursor": f"{cursor!r} is not a cursor this agent gave"})
        where = str(Path(cwd).resolve()) if cwd else None
        found = await asyncio.to_thread(
            self.agent.store.list_sessions,
            self.agent.settings.profile,
            limit=LIST_PAGE + 1,
            offset=offset or 0,
            mounted=True,
            workspace=where,
        )
        sessions = [
            SessionInfo(
                session_id=record.id,
                cwd=record.workspace or "",
                title=record.title,
                updated_at=datetime.fromtimestamp(record.updated_at, UTC).isoformat(),
            )
            for record in found[:LIST_PAGE]
        ]
        more = str((offset or 0) + LIST_PAGE) if len(found) > LIST_PAGE else None
        return ListSessionsResponse(sessions=sessions, next_cursor=more)

    async def _open(self, conversation: Conversation, workspace: Path) -> None:
        await asyncio.to_thread(self.agent.store.update_session, conversation.id, workspace=str(workspace))
        self.agent.sandboxes.use_workspace(conversation.id, str(workspace))
        assert self.client is not None
        files = EditorFiles(
            self.client,
            conversation.id,
            workspace,
            self.agent.settings.sandbox.workdir,
            asyncio.get_running_loop(),
        )
        conversation.tools = files.tools(conversation.tools, self.client_capabilities)
        self.sessions[conversation.id] = _Session(conversation, workspace)
        commands = [
            AvailableCommand(
                name=name.lstrip("/"),
                description=about,
                input=AvailableCommandInput(UnstructuredCommandInput(hint="NAME"))
                if name == "/model"
                else None,
            )
            for name, about in HELP.items()
            if name not in SESSION_COMMANDS
        ]
        # after the response to session/new (or load) is out: the session exists for the editor then
        asyncio.get_running_loop().call_soon(
            self._later, self._send(conversation.id, update_available_commands(commands))
        )

    def _later(self, send: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(send)
        self._pending.add(task)  # held until done: the loop keeps only weak references to tasks
        task.add_done_callback(self._pending.discard)

    def _session(self, session_id: str) -> _Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params(
                {"sessionId": f"no open session {session_id}: session/new or load"}
            )
        return session

    def _ask(self, session: _Session, question: Question, call_id: str) -> None:
        assert self.client is not None
        task = asyncio.create_task(ask_editor(self.client, session.conversation, question, call_id))
        session.asks.add(task)
        task.add_done_callback(session.asks.discard)

    async def _drain(
        self, session: _Session, queue: asyncio.Queue[SessionUpdate | tuple[Question, str] | None]
    ) -> None:
        """Send a turn's updates in order; a question is asked after the updates before it are out."""
        while (item := await queue.get()) is not None:
            if isinstance(item, tuple):
                self._ask(session, *item)
            else:
                await self._send(session.conversation.id, item)

    async def _send(self, session_id: str, update: SessionUpdate) -> None:
        assert self.client is not None
        try:
            await self.client.session_update(session_id=session_id, update=update)
        except Exception:  # the editor went away mid-turn: the run goes on, its history is stored
            log.warning("session/update to the editor failed", exc_info=True)


def _replay(history: list[dict[str, Any]]) -> list[SessionUpdate]:
    """A stored conversation as the updates that would have shown it: user and agent messages."""
    updates: list[SessionUpdate] = []
    for message in history:
        content = message.get("content")
        if not isinstance(content, str) or not content:
            continue
        if message.get("role") == "user":
            updates.append(update_user_message_text(content))
        elif message.get("role") == "assistant":
            updates.append(update_agent_message_text(content))
    return updates
