"""`hermetic mcp serve`: the agent's sandbox tools, execute_code, recall, read-only memory and skills,
and the whole agent (`agent_run`), offered to any MCP client over stdio or streamable HTTP.

Tool schemas are the agent's own (the registry's pydantic models), and a call takes the agent's one path
(agent/tool_call.py): checkpoint, the sandbox held in use, invoke, notices, redaction, clip, audit row.
Each MCP session is a session of the store (source "mcp") that owns a sandbox, created on first use
(from the warm pool when there is one): on stdio the process is the session; over HTTP a 2025 client's
Mcp-Session-Id is, and a 2026-07-28 client (the protocol has no sessions) gets one per bearer token.
Each call is a turn of its own (at most one checkpoint). A sandbox unused for `mcp.idle_seconds` is
closed and its session ended; `sandbox_reset` gives a fresh sandbox.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import secrets
import threading
import time
from collections import Counter
from concurrent.futures import Future
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS
from pydantic import BaseModel, Field

from .. import __version__
from ..agent.agent import Agent
from ..agent.budget import Budget
from ..agent.loop import Conversation
from ..agent.tool_call import run_tool_call, tool_start
from ..events import Event, Notice
from ..models.router import ToolCall
from ..tools import Interrupt, Tool, ToolContext, ToolOutcome, ToolResult
from ..tools.memory import MemoryTarget
from .content import tool_content

log = logging.getLogger(__name__)
SANDBOX_TOOLSETS = ("terminal", "files", "browser", "code")
VIEWS = ("session_search", "skills_list", "skill_view")
"""Registry tools offered as they are (they only read)."""


class NoArgs(BaseModel):
    pass


class AgentRunArgs(BaseModel):
    task: str = Field(
        min_length=1, max_length=100_000, description="What the agent should do, as to a colleague."
    )


class McpSurface:
    """The tools this server offers and the sandbox of each MCP session."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        settings = agent.settings
        toolsets = [name for name in SANDBOX_TOOLSETS if name in settings.toolsets]
        self.script_tools: dict[str, Tool[Any]] = dict(agent.registry.select(toolsets))
        """The registry's tools offered here: what an execute_code script may call (not this surface's own,
        so a script cannot close its own sandbox)."""
        for name in VIEWS:
            found = agent.registry.get(name)
            if found is not None:
                self.script_tools[name] = found
        self.tools = dict(self.script_tools)
        own: list[Tool[Any]] = [
            Tool(
                "memory",
                "Read the agent's curated memory: its notes (memory) or what it knows about the user (user).",
                MemoryTarget,
                self._memory,
                "mcp",
                parallel_safe=True,
            ),
            Tool(
                "sandbox_reset",
                "Close this session's sandbox; the next tool call gets a fresh one.",
                NoArgs,
                self._reset,
                "mcp",
            ),
            Tool(
                "agent_run",
                "Give the whole Hermetic agent a task: it works in its own sandbox with its "
                "tools, memory and skills, reports its steps as progress, and returns its answer.",
                AgentRunArgs,
                self._agent_run,
                "mcp",
            ),
        ]
        self.tools.update({tool.name: tool for tool in own})
        self.stdio_key = f"mcp-{secrets.token_hex(6)}"
        """The MCP session's key when the process is the session (stdio)."""
        self.sessions: dict[str, str] = {}
        """The store's session of each MCP session this process has served, by key (`session_key`): the
        store's bindings (surface `mcp`) read once, so a call does not ask the database."""
        self._used: dict[str, float] = {}
        """When each store session's last call started or ended."""
        self._in_flight: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runs: dict[str, Conversation] = {}
        """agent_run calls in progress, by call id (a cancelled call interrupts its run)."""

    # -- the protocol's two calls ----------------------------------------------------------

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_mcp_tool(tool) for tool in self.tools.values()])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        tool = self.tools.get(params.name)
        if tool is None:
            raise MCPError(INVALID_PARAMS, f"there is no tool named {params.name!r}")
        self._loop = asyncio.get_running_loop()
        key = self.session_key(ctx)
        call = ToolCall(
            id=f"mcp-{secrets.token_hex(4)}", name=tool.name, arguments=json.dumps(params.arguments or {})
        )
        progress = _Progress(ctx, self._loop)
        cancelled = Interrupt()
        try:
            outcome = await asyncio.to_thread(self._run, key, tool, call, progress, cancelled)
        except asyncio.CancelledError:  # the client cancelled the call: stop what it started
            cancelled.set()
            with self._lock:
                run = self._runs.get(call.id)
            if run is not None:
                run.interrupt()
            session = self.sessions.get(key)
            if session is not None:
                interrupt = self.agent.sandboxes.interrupt
                threading.Thread(target=interrupt, args=(session,), daemon=True).start()
            raise
        await progress.flush()
        return types.CallToolResult(
            content=tool_content(outcome.content, outcome.images), is_error=not outcome.ok
        )

    def _begin(self, key: str) -> str:
        """The store's session of this MCP session (created on its first call), marked busy until `_end`
        (a reap passes it by)."""
        with self._lock:
            if key not in self.sessions:
                self.sessions[key] = self._bound(key)
            session = self.sessions[key]
            self._in_flight[session] += 1
            self._used[session] = time.monotonic()
            return session

    def _bound(self, key: str) -> str:
        """The session bound to `key` (one a server before a restart started too), else a new one."""
        agent = self.agent
        found = agent.bindings.get("mcp", key)
        if found is not None and agent.store.get_session(found.session_id, agent.settings.profile):
            return found.session_id
        settings = agent.settings
        record = agent.store.create_session(
            settings.profile, title="MCP client", model=settings.model.name, source="mcp"
        )
        agent.bindings.bind("mcp", key, record.id)
        return record.id

    def _end(self, session: str) -> None:
        with self._lock:
            self._in_flight[session] -= 1
            self._used[session] = time.monotonic()

    def _run(
        self, key: str, tool: Tool[Any], call: ToolCall, progress: _Progress, cancelled: Interrupt
    ) -> ToolOutcome:
        """In a worker thread: the call, and the calls of a script it runs, through the agent's one path as
        one turn; returns once their audit rows are written."""
        agent = self.agent
        session = self._begin(key)
        budget = Budget(1, tool_limit=agent.settings.limits.max_tool_calls)
        turn_state: dict[str, Any] = {}
        writes: list[Future[Any]] = []
        numbers = itertools.count(1)

        def write(fn: Any, *args: Any, **kwargs: Any) -> None:
            writes.append(agent.writer.submit(fn, *args, **kwargs))

        def emit(event: Event) -> None:  # into the run log, as the loop's events are
            event.session_id = session
            agent.event_log.write(event)

        def notify(message: str) -> None:
            emit(Notice(message=message))
            progress(message)

        def one(tool: Tool[Any] | None, call: ToolCall) -> ToolOutcome:
            ctx = ToolContext(
                session_id=session,
                call_id=call.id,
                limits=agent.settings.limits,
                get_sandbox=lambda: agent.sandboxes.get(session),
                progress=progress,
                cancelled=cancelled,
                profile=agent.settings.profile,
                store=agent.store,
                memory=agent.memory,
                skills=agent.skills,
                notify=notify,
                turn_state=turn_state,
                emit=emit,
                call_tool=script_call,
                tools=self.script_tools,
                settings=agent.settings,
            )
            emit(tool_start(call))
            return run_tool_call(agent, tool, call, ctx, budget, emit, write)

        def script_call(name: str, arguments: dict[str, Any]) -> ToolOutcome:
            inner = ToolCall(id=f"{call.id}.{next(numbers)}", name=name, arguments=json.dumps(arguments))
            return one(self.script_tools.get(name), inner)

        try:
            outcome = one(tool, call)
        finally:
            self._end(session)
        for written in writes:
            written.result()  # the writer keeps and logs a failure; the call's result stands
        return outcome

    def session_key(self, ctx: ServerRequestContext[Any]) -> str:
        request = ctx.request
        headers = getattr(request, "headers", None)
        if headers is None:
            return self.stdio_key
        session = headers.get("mcp-session-id")
        if session:
            return "mcp-" + hashlib.sha256(session.encode()).hexdigest()[:16]
        return "mcp-t" + hashlib.sha256(headers.get("authorization", "").encode()).hexdigest()[:16]

    def reap(self, idle_seconds: float) -> list[str]:
        """Close the sandboxes of the sessions with no call for `idle_seconds` and end those sessions
        (the MCP session's next call starts a new one); returns their ids."""
        now = time.monotonic()
        with self._lock:
            idle = [
                session
                for session, used in self._used.items()
                if now - used > idle_seconds and not self._in_flight[session]
            ]
            for session in idle:
                del self._used[session], self._in_flight[session]
            gone = [key for key, s in self.sessions.items() if s in idle]
            for key in gone:
                del self.sessions[key]
        for key in gone:
            self.agent.bindings.forget("mcp", key)
        for session in idle:
            self.agent.sandboxes.release(session)
            self.agent.store.update_session(session, ended_at=time.time())
        return idle

    # -- the tools of this surface ---------------------------------------------------------

    def _memory(self, ctx: ToolContext, args: MemoryTarget) -> ToolResult:
        assert ctx.memory is not None
        return ToolResult(ctx.memory.read(args.target).message)

    def _reset(self, ctx: ToolContext, args: NoArgs) -> ToolResult:
        had = self.agent.sandboxes.peek(ctx.session_id) is not None
        self.agent.sandboxes.release(ctx.session_id)
        return ToolResult(
            "the sandbox was closed; the next call gets a fresh one" if had else "no sandbox was open"
        )

    def _agent_run(self, ctx: ToolContext, args: AgentRunArgs) -> ToolResult:
        """In a worker thread: a new conversation runs on the server's loop; its steps become progress."""
        assert self._loop is not None
        conversation = self.agent.new_conversation(title=args.task[:80], source="mcp")

        def emit(event: Event) -> None:
            line = _step(event)
            if line:
                ctx.progress(line)

        with self._lock:
            self._runs[ctx.call_id] = conversation
        try:
            end = asyncio.run_coroutine_threadsafe(conversation.run(args.task, emit), self._loop).result()
        finally:
            with self._lock:
                self._runs.pop(ctx.call_id, None)
            conversation.close()
        if end.reason == "error":
            return ToolResult(f"error: the agent stopped on an error (session {conversation.id})", ok=False)
        return ToolResult(
            f"{end.content}\n[session {conversation.id} · {end.reason} · {end.iterations} steps]"
        )


class _Progress:
    """ToolContext.progress for an MCP call: callable from any thread, sent in order as progress
    notifications (a no-op when the client asked for none); `flush` before the result goes out."""

    def __init__(self, ctx: ServerRequestContext[Any], loop: asyncio.AbstractEventLoop) -> None:
        self.ctx = ctx
        self.loop = loop
        self.count = 0
        self.sent: list[asyncio.Future[None]] = []

    def __call__(self, text: str) -> None:
        self.loop.call_soon_threadsafe(self._send, text)

    def _send(self, text: str) -> None:
        self.count += 1
        self.sent.append(
            asyncio.ensure_future(self.ctx.session.report_progress(self.count, None, text[-2000:]))
        )

    async def flush(self) -> None:
        await asyncio.sleep(0)  # let sends scheduled from the worker thread start
        await asyncio.gather(*self.sent, return_exceptions=True)


def _step(event: Event) -> str:
    if event.type == "tool_start":
        arguments = event.arguments if isinstance(event.arguments, str) else json.dumps(event.arguments)
        return f"{event.name} {arguments[:200]}"
    if event.type == "tool_end":
        return f"{event.name} {'done' if event.ok else 'failed'} in {event.duration_ms:.0f} ms"
    if event.type in ("notice", "error"):
        return str(getattr(event, "message", ""))
    return ""


def _mcp_tool(tool: Tool[Any]) -> types.Tool:
    function = tool.schema()["function"]
    return types.Tool(
        name=tool.name, description=function["description"], input_schema=function["parameters"]
    )


def build_server(surface: McpSurface) -> Server[Any]:
    return Server(
        "hermetic",
        version=__version__,
        instructions="Sealed sandboxes as tools (a sandbox per session; sandbox_reset for a fresh one), "
        "recall of past sessions, the agent's memory and skills to read, and agent_run to delegate a task.",
        on_list_tools=surface.list_tools,
        on_call_tool=surface.call_tool,
    )
