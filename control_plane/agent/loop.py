"""The agent loop: model call, tool batch, repeat, until the model answers without tools.

One `Conversation` per session. `run(text, emit)` handles one user message; from another task or
thread, `steer(text)` adds a user message after the current tool batch and `interrupt()` stops the
run (the model call is cancelled, running commands are interrupted, the history stays valid).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from typing import Any

from ..events import AssistantMessage, Error, Event, Notice, TodoItem, ToolProgress, TurnEnd, UserMessage
from ..models.router import ModelError, ModelNotConfigured, ModelReply, ToolCall
from ..tools import Interrupt, SendFile, Tool, ToolContext, ToolOutcome, ToolResult
from ..tools.todo import plan_block
from .base import AgentBase
from .budget import Budget
from .calls import groups, parsed, wire_call
from .compression import Compressor
from .delegation import delegate_batch, may_delegate
from .learning import CORRECTION, REVIEW_PROMPT, REVIEW_TOOLSETS, TurnRecord, review_of, review_reasons
from .questions import Questions
from .skill_reviews import review_skills
from .tool_call import run_tool_call, tool_start
from .tool_images import show_images

log = logging.getLogger("hermetic.agent")
Emit = Callable[[Event], None]
NOT_RUN = "[not run: the user interrupted before this call started]"


class Busy(RuntimeError):
    """A run is already going on in this conversation (steer it, or interrupt it)."""


class Conversation:
    def __init__(
        self,
        agent: AgentBase,
        session_id: str,
        history: list[dict[str, Any]],
        *,
        tools: dict[str, Tool[Any]] | None = None,
        learns: bool = True,
    ) -> None:
        self.agent = agent
        self.id = session_id
        self.history = history
        self.tools = agent.tools if tools is None else tools
        self.schemas = [tool.schema() for tool in self.tools.values()]
        self.forked = not learns
        """A fork (a learning review): its turns neither count skill outcomes nor get reviewed."""
        self.learns = learns and "memory" in agent.settings.toolsets
        """Whether finished turns may be reviewed for memory (a review itself is not)."""
        self._last_loaded: list[str] = []
        """Skills the last turn loaded and counted a success: a correction by the user turns them over."""
        self._turns_without_memory = 0
        self.notices: list[str] = []
        """Told to the user when the next run starts (memory entries withheld by the threat scan)."""
        self._steers: list[str] = []
        self._lock = threading.Lock()
        self._running = False
        self._steerable = False
        """False once the turn's final answer is in: a message then starts the next turn, not a steer."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._interrupt_async: asyncio.Event | None = None
        self._cancelled = Interrupt()
        self._last_write: Future[Any] | None = None
        self._turn_state: dict[str, Any] = {}
        self._send_file: SendFile | None = None
        self._turn_record = TurnRecord(user_text="")
        self.compressor = Compressor(agent.settings.compression, agent.router)
        self.router = agent.router
        """The models this session calls (`/model` switches it for this session only)."""
        self.questions = Questions()
        """What the running turn waits for the user to answer (approvals, clarifications)."""
        system = history[0]["content"] if history else ""
        self.rebuild_system: Callable[[], str] = lambda: system
        """After a compression the system prompt is rebuilt with this (fresh memory: the prefix cache is
        lost then anyway), and the plan added to it."""
        self.todo: list[TodoItem] = []
        """The plan of the todo tool, kept across turns."""
        # a delegate call's child: depth 0 is the user's own conversation; a child's model calls per turn
        # (else limits.max_iterations) are spent from its parent's turn budget too
        self.depth = 0
        self.max_iterations: int | None = None
        self.parent_budget: Budget | None = None
        self.children: set[Conversation] = set()
        """The children a running delegate call started (an interrupt reaches them)."""
        self._budget = Budget(1)  # the running turn's, which a delegate call draws on (set by _turn)

    @classmethod
    def open(
        cls,
        agent: AgentBase,
        *,
        title: str | None = None,
        source: str = "cli",
        parent_id: str | None = None,
        system: str | None = None,
        toolsets: list[str] | None = None,
        learns: bool | None = None,
    ) -> Conversation:
        """A new session of `agent`. A review fork or a delegated child passes its own system prompt and
        toolsets; `learns` (default: only with the agent's own tools) says whether it is not a fork."""
        record = agent.store.create_session(
            agent.settings.profile,
            title=title,
            model=agent.settings.model.name,
            source=source,
            parent_id=parent_id,
        )
        prompt = {"role": "system", "content": agent.system_prompt(system)}
        agent.store.add_message(record.id, prompt)
        tools = agent.registry.select(toolsets) if toolsets is not None else agent.tools
        learning = toolsets is None if learns is None else learns
        conversation = cls(agent, record.id, [prompt], tools=tools, learns=learning)
        conversation.notices += agent.problems()
        conversation.rebuild_system = lambda: agent.system_prompt(system)
        return conversation

    @property
    def running(self) -> bool:
        return self._running

    # -- control from other tasks or threads -----------------------------------------------

    def steer(self, text: str) -> bool:
        """Queue a user message for the running turn (after its current tool batch). False if idle."""
        with self._lock:
            if not self._running or not self._steerable:
                return False
            self._steers.append(text)
            return True

    def interrupt(self) -> bool:
        """Stop the running turn. False if idle."""
        with self._lock:
            if not self._running or self._loop is None or self._interrupt_async is None:
                return False
            self._cancelled.set()
            self._loop.call_soon_threadsafe(self._interrupt_async.set)
        self.questions.cancel_all()
        for child in list(self.children):
            child.interrupt()
        threading.Thread(target=self.agent.sandboxes.interrupt, args=(self.id,), daemon=True).start()
        return True

    def answer(self, question_id: str, answer: str) -> bool:
        """Answer a question the running turn asked. False when it is not open (answered, timed out);
        ValueError when the question has choices and this is not one of them."""
        return self.questions.answer(question_id, answer)

    # -- one user message ------------------------------------------------------------------

    async def send(self, text: str) -> AsyncIterator[Event]:
        """`run` as an async iterator of its events."""
        queue: asyncio.Queue[Event | None] = asyncio.Queue()
        task = asyncio.create_task(self.run(text, queue.put_nowait))
        task.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            while (event := await queue.get()) is not None:
                yield event
            task.result()
        finally:
            if not task.done():
                self.interrupt()
                await asyncio.gather(task, return_exceptions=True)

    async def run(self, text: str, emit: Emit, *, send_file: SendFile | None = None) -> TurnEnd:
        """Answer one user message; every step is emitted and stored. Raises Busy if already running.
        `send_file`: the surface's way to the user's chat for this turn (the send_file tool's)."""
        with self._lock:
            if self._running:
                raise Busy(f"session {self.id} is already running; steer or interrupt it")
            self._running = True
            self._steerable = True
            self._steers.clear()
            self._loop = asyncio.get_running_loop()
            self._interrupt_async = asyncio.Event()
            self._cancelled.clear()
            self._turn_state = {}
            self._send_file = send_file
            self._turn_record = TurnRecord(user_text=text)
            corrected, self._last_loaded = (self._last_loaded if CORRECTION.search(text) else []), []
        loop = self._loop

        def emit_event(event: Event) -> None:
            event.session_id = event.session_id or self.id
            if event.session_id == self.id:  # a child's events are logged by the child
                self.agent.event_log.write(event)
            emit(event)

        def emit_threadsafe(event: Event) -> None:
            loop.call_soon_threadsafe(emit_event, event)

        try:
            try:
                end = await self._turn(text, emit_event, emit_threadsafe)
            except Exception as exc:  # the loop must survive anything; the user sees what happened
                log.exception("session %s: run failed", self.id)
                emit_event(Error(message=f"internal error: {type(exc).__name__}: {exc}", kind="internal"))
                end = TurnEnd(reason="error")
            with self._lock:
                self._steerable = False
            if end.reason in ("done", "error"):  # an interrupt or the budget says nothing about skills
                self._write(self._skill_outcome, end.reason == "done", list(self.history), corrected)
            await self._flush(emit_event)
            self.agent.sandboxes.prepare(self.id)  # for the next turn's checkpoint, made while it is idle
        finally:
            with self._lock:
                self._running = False
        if end.reason == "done":
            self._learn(self._turn_record, emit_event)
        emit_event(end)
        return end

    def _learn(self, turn: TurnRecord, emit: Emit) -> None:
        """Schedule a background review of this conversation when the turn taught something."""
        if not self.learns:
            return
        self._turns_without_memory = 0 if turn.memory_written else self._turns_without_memory + 1
        learning = self.agent.settings.learning
        if not learning.enabled:
            return
        reasons = review_reasons(turn, self._turns_without_memory, learning.nudge_every, learning.busy_tools)
        if not reasons:
            return
        self._turns_without_memory = 0
        notice, text = review_of(reasons, self.history)
        emit(Notice(message=notice))
        self.agent.background.submit(self._fork(f"review of {self.id}", REVIEW_PROMPT, REVIEW_TOOLSETS, text))

    def _skill_outcome(self, success: bool, messages: list[dict[str, Any]], corrected: list[str]) -> None:
        """On the writer thread: count the turn for its skills; schedule the skill reviews now due."""
        loaded = review_skills(self.agent, self.id, success, messages, corrected, self._fork)
        self._last_loaded = loaded if success else []

    async def _fork(self, title: str, system: str, toolsets: list[str], text: str) -> str:
        """A forked reviewer of this conversation, run to completion; returns its session id."""
        fork = Conversation.open(
            self.agent, title=title, source="review", parent_id=self.id, system=system, toolsets=toolsets
        )

        def quiet(event: Event) -> None:
            if event.type == "error":
                log.warning("%s: %s", title, getattr(event, "message", ""))

        try:
            await fork.run(text, quiet)
        finally:
            fork.close()
        return fork.id

    async def _turn(self, text: str, emit: Emit, emit_threadsafe: Emit) -> TurnEnd:
        agent = self.agent
        for notice in self.notices:
            emit(Notice(message=notice))
        self.notices = []
        sent, notices = await asyncio.to_thread(agent.turn_text, self.id, text)
        for notice in notices:
            emit(Notice(message=notice))
        self.history.append({"role": "user", "content": sent})
        self._write(agent.store.add_message, self.id, {"role": "user", "content": text})
        emit(UserMessage(content=text))
        limit = self.max_iterations or agent.settings.limits.max_iterations
        self._budget = budget = Budget(limit, self.parent_budget, agent.settings.limits.max_tool_calls)
        iteration = 0
        while budget.take():
            iteration += 1
            if not await self._compress(emit):
                return TurnEnd(reason="interrupted", iterations=iteration)
            reply = await self._model_step(emit)
            if reply is None:
                return TurnEnd(reason="interrupted", iterations=iteration)
            if isinstance(reply, Error):
                emit(reply)
                return TurnEnd(reason="error", iterations=iteration)
            message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
            if reply.tool_calls:
                message["tool_calls"] = [wire_call(call) for call in reply.tool_calls]
            self._append(
                message,
                model=reply.model,
                prompt_tokens=reply.usage.prompt_tokens,
                completion_tokens=reply.usage.completion_tokens,
                cost=reply.usage.cost,
                reasoning=reply.reasoning,
            )
            emit(
                AssistantMessage(
                    content=reply.content, tool_calls=message.get("tool_calls", []), model=reply.model
                )
            )
            if not reply.tool_calls:
                with self._lock:  # a steer that came after the last tool batch gets its own answer
                    steers, self._steers = self._steers, []
                    self._steerable = bool(steers)
                if not steers:
                    return TurnEnd(reason="done", content=reply.content, iterations=iteration)
            else:
                await self._tool_batch(reply.tool_calls, emit, emit_threadsafe)
                if self._cancelled.is_set():
                    return TurnEnd(reason="interrupted", iterations=iteration)
                with self._lock:
                    steers, self._steers = self._steers, []
            for steer in steers:
                self._append({"role": "user", "content": steer})
                emit(UserMessage(content=steer, steer=True))
        why = "its delegated budget" if self.depth else "limits.max_iterations"
        emit(Notice(message=f"stopped after {iteration} model calls ({why}); send another message to go on"))
        return TurnEnd(reason="budget", iterations=iteration)

    async def _compress(self, emit: Emit) -> bool:
        """Compress the history sent to the model if it nears the window (the database keeps all of it).
        False when an interrupt came first."""
        model = self.agent.settings.model.name
        if model is None or not self.compressor.due(self.history, model, self.schemas or None):
            return True  # no model: the model step says how to set one; not due: no task (loop passes)
        work = asyncio.ensure_future(
            self.compressor.maybe_compress(self.history, model, tools=self.schemas or None, emit=emit)
        )
        if not await self._unless_interrupted(work):
            return False
        compression = work.result()
        if compression is not None:
            self.history = compression.messages
            plan = plan_block(self.todo)
            system = self.rebuild_system() + (f"\n\n{plan}" if plan else "")
            self.history[0] = {"role": "system", "content": system}
            emit(Notice(message=compression.notice))
        return True

    async def _model_step(self, emit: Emit) -> ModelReply | Error | None:
        """One model call, cancelled by an interrupt (None) or failed (an Error event)."""
        call = asyncio.ensure_future(self.router.complete(self.history, self.schemas or None, emit=emit))
        if not await self._unless_interrupted(call):
            return None
        try:
            return call.result()
        except ModelNotConfigured as exc:
            return Error(message=str(exc), kind="config")
        except ModelError as exc:
            return Error(message=str(exc), kind="model")

    async def _unless_interrupted(self, work: asyncio.Future[Any]) -> bool:
        """Wait for `work`; False, with `work` cancelled, when an interrupt comes first."""
        assert self._interrupt_async is not None
        stop = asyncio.ensure_future(self._interrupt_async.wait())
        await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if work.done():
            return True
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        return False

    # -- tools -----------------------------------------------------------------------------

    async def _tool_batch(self, calls: list[ToolCall], emit: Emit, emit_threadsafe: Emit) -> None:
        """Run the calls, parallel-safe neighbours together, and append their results in call order."""
        results: dict[str, ToolOutcome] = {}
        limit = asyncio.Semaphore(self.agent.settings.limits.parallel_tools)

        async def one(call: ToolCall) -> None:
            async with limit:
                results[call.id] = await self._call_tool(call, emit, emit_threadsafe)

        for group in groups(calls, self.tools):
            if self._cancelled.is_set():
                break
            await asyncio.gather(*(one(call) for call in group))
        for call in calls:
            content = results[call.id].content if call.id in results else NOT_RUN
            self._append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content})
        show_images(self.history, results, self.router.settings)

    async def _call_tool(self, call: ToolCall, emit: Emit, emit_threadsafe: Emit) -> ToolOutcome:
        emit(tool_start(call))
        ctx = self._context(call.id, emit_threadsafe)
        outcome = await asyncio.to_thread(
            run_tool_call,
            self.agent,
            self.tools.get(call.name),
            call,
            ctx,
            self._budget,
            emit_threadsafe,
            self._write,
        )
        self._turn_record.tool_done(call.name, outcome.ok, parsed(call.arguments))
        return outcome

    def _context(self, call_id: str, emit_threadsafe: Emit) -> ToolContext:
        """What a handler of this conversation's call may use (execute_code's inner calls get their own)."""
        agent = self.agent
        return ToolContext(
            session_id=self.id,
            call_id=call_id,
            limits=agent.settings.limits,
            get_sandbox=lambda: agent.sandboxes.get(self.id),
            progress=lambda text: emit_threadsafe(ToolProgress(call_id=call_id, text=agent.redact(text))),
            cancelled=self._cancelled,
            profile=agent.settings.profile,
            store=agent.store,
            memory=agent.memory,
            skills=agent.skills,
            notify=lambda message: emit_threadsafe(Notice(message=message)),
            turn_state=self._turn_state,
            proposer="review" if self.forked else "agent",
            ask=lambda **question: self.questions.ask(
                emit_threadsafe, **{"timeout": agent.settings.agent.question_timeout, **question}
            ),
            emit=emit_threadsafe,
            todo=self.todo,
            delegate=self._delegator(call_id, emit_threadsafe),
            call_tool=self._inner_calls(call_id, emit_threadsafe),
            ask_model=self._ask_model,
            tools=self.tools,
            settings=agent.settings,
            send_file=self._send_file,
        )

    def _ask_model(self, system: str, text: str, images: tuple[str, ...] = ()) -> str | None:
        """From a handler's thread: one model call on the running turn's loop, counted in its budget;
        `images` (data URLs) go with the text as content parts."""
        if self._loop is None or not self._budget.take():
            return None
        parts = [{"type": "image_url", "image_url": {"url": url}} for url in images]
        content: Any = [{"type": "text", "text": text}, *parts] if parts else text
        messages = [{"role": "system", "content": system}, {"role": "user", "content": content}]
        work = asyncio.run_coroutine_threadsafe(
            self.router.complete(messages, None, stream=False), self._loop
        )
        try:
            return work.result().content or None
        except ModelError as exc:
            log.warning("session %s: a tool's model call failed: %s", self.id, exc)
            return None

    def _inner_calls(
        self, call_id: str, emit_threadsafe: Emit
    ) -> Callable[[str, dict[str, Any]], ToolOutcome]:
        """Runs the calls a script makes from inside `call_id` (execute_code), in the caller's thread."""
        numbers = itertools.count(1)

        def call_tool(name: str, arguments: dict[str, Any]) -> ToolOutcome:
            inner = ToolCall(id=f"{call_id}.{next(numbers)}", name=name, arguments=json.dumps(arguments))
            emit_threadsafe(tool_start(inner))
            ctx = self._context(inner.id, emit_threadsafe)
            tool = self.tools.get(name)
            return run_tool_call(self.agent, tool, inner, ctx, self._budget, emit_threadsafe, self._write)

        return call_tool

    def _delegator(self, call_id: str, emit: Emit) -> Callable[[Any], ToolResult] | None:
        """The delegate call's runner, when this conversation may start children (agent.max_depth)."""
        if not may_delegate(self.agent.settings.agent.max_depth, self.depth):
            return None
        return lambda args: delegate_batch(self, call_id, args, self._budget, emit, self._cancelled)

    def _append(self, message: dict[str, Any], **usage: Any) -> None:
        self.history.append(message)
        self._write(self.agent.store.add_message, self.id, message, **usage)

    def _write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Queue a database write; they run in order on the agent's writer thread, off the step's
        critical path, and `_flush` waits for them at the end of the turn."""
        self._last_write = self.agent.writer.submit(fn, *args, **kwargs)

    async def _flush(self, emit: Emit) -> None:
        if self._last_write is None:
            return
        await asyncio.wrap_future(self._last_write)
        self._last_write = None
        writer = self.agent.writer
        with writer.lock:
            failures, writer.errors[:] = list(writer.errors), []
        for failure in failures:  # the run went on; what could not be saved is said, not hidden
            emit(Error(message=f"could not save to the sessions database: {failure}", kind="storage"))

    def close(self) -> None:
        """The session is over: release its sandbox and mark it ended."""
        self.agent.sandboxes.release(self.id)
        self.agent.end_session(self.id)
