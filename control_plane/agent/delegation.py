"""Child agents for the delegate tool: each task a Conversation of its own (source "delegate", the
caller as parent), in a sandbox of its own, run in parallel; the caller gets back summaries only.

A delegate call runs in its tool worker thread on an event loop of its own, so the children's tool
calls use that loop's threads and never wait behind the caller's. Each child's events go onto the
caller's stream tagged with the delegate call (`Event.delegate_call`), between a ChildStart and a
ChildEnd; its turn_end stays inside (a surface waiting for the session's turn_end must not stop early).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Protocol

from backends import SandboxError

from ..events import AssistantMessage, ChildEnd, ChildStart, ChildStatus, Error, Event, TurnEnd
from ..tools import Tool, ToolResult
from ..tools.delegate import DelegateArgs, Task
from .base import AgentBase
from .budget import Budget
from .prompt import system_prompt
from .questions import Questions

log = logging.getLogger("hermetic.delegation")
Emit = Callable[[Event], None]
GRACE = 10.0
"""Seconds a child gets to stop after an interrupt before its sandbox is closed under it."""
NEVER_INHERITED = {"clarify"}  # only the agent talking to the user asks the user
STATUS: dict[str, ChildStatus] = {
    "done": "done",
    "error": "failed",
    "budget": "out_of_budget",
    "interrupted": "interrupted",
}

CHILD_ROLE = """You are a child agent: another agent delegated one task to you. You see only the task \
and the context it gave; it sees only your final reply. Work in your own sandbox until the task is done \
or cannot be done, then answer with a short report: what you did, what you found, the files you changed \
(paths), and anything left open. Do not ask questions: decide, and say what you assumed."""


class TaskRefused(ValueError):
    """A task the caller may not give (toolsets it does not have)."""


class Child(Protocol):
    id: str
    depth: int
    max_iterations: int | None
    parent_budget: Budget | None
    questions: Questions

    async def run(self, text: str, emit: Emit) -> TurnEnd: ...

    def interrupt(self) -> bool: ...

    def close(self) -> None: ...


class Parent(Protocol):
    """What delegation needs of the conversation that calls delegate (loop.Conversation)."""

    agent: AgentBase
    id: str
    depth: int
    tools: dict[str, Tool[Any]]
    children: set[Any]

    questions: Questions

    def open(
        self,
        agent: AgentBase,
        *,
        title: str | None = None,
        source: str = "cli",
        parent_id: str | None = None,
        system: str | None = None,
        toolsets: list[str] | None = None,
        learns: bool | None = None,
    ) -> Child:
        """Conversation.open: a new session."""


@dataclass
class Outcome:
    index: int
    goal: str
    status: ChildStatus
    summary: str
    session_id: str = ""
    iterations: int = 0
    files: str = ""


def may_delegate(settings_max_depth: int, depth: int) -> bool:
    """Whether a conversation at `depth` (0: the user's own) may start children."""
    return depth + 1 < settings_max_depth


def delegate_batch(
    parent: Parent, call_id: str, args: DelegateArgs, budget: Budget, emit: Emit, cancelled: threading.Event
) -> ToolResult:
    """Run the call's tasks as children in parallel (in the tool's worker thread); their summaries."""
    limits = parent.agent.settings.agent
    if len(args.tasks) > limits.max_children:
        return ToolResult(
            f"error: at most {limits.max_children} tasks per delegate call (agent.max_children); "
            f"this call has {len(args.tasks)}: split it or merge tasks",
            ok=False,
        )
    batch = _Batch(parent, call_id, budget, emit, cancelled)
    loop = asyncio.new_event_loop()
    try:
        outcomes = loop.run_until_complete(batch.run(args.tasks))
    finally:
        for task in asyncio.all_tasks(loop):  # only a child that would not stop is left
            task.cancel()
        # async generators' cleanup, as asyncio.run does (the model clients the children opened)
        loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), 5))
        loop.close()  # without waiting for the threads of such a child's stuck tool call
    report = {
        "tasks": len(outcomes),
        "done": sum(o.status == "done" for o in outcomes),
        "results": [{k: v for k, v in vars(o).items() if v != ""} for o in outcomes],
    }
    return ToolResult(json.dumps(report, indent=1, ensure_ascii=False), ok=report["done"] == len(outcomes))


class _Batch:
    def __init__(
        self, parent: Parent, call_id: str, budget: Budget, emit: Emit, cancelled: threading.Event
    ) -> None:
        self.parent = parent
        self.agent = parent.agent
        self.call_id = call_id
        self.budget = budget
        self.emit = emit
        self.cancelled = cancelled

    async def run(self, tasks: list[Task]) -> list[Outcome]:
        return list(await asyncio.gather(*(self.one(index, task) for index, task in enumerate(tasks, 1))))

    async def one(self, index: int, task: Task) -> Outcome:
        try:
            return await self._child(index, task)
        except TaskRefused as exc:
            return Outcome(index, task.goal, "failed", f"not started: {exc}")
        except Exception as exc:  # a child's failure is its status, never the parent's crash
            log.exception("delegate %s: task %d failed to start", self.call_id, index)
            return Outcome(index, task.goal, "failed", f"could not start: {type(exc).__name__}: {exc}")

    async def _child(self, index: int, task: Task) -> Outcome:
        settings = self.agent.settings
        toolsets = self._toolsets(task)
        limit = min(task.max_iterations or settings.agent.child_iterations, self.budget.left)
        if self.cancelled.is_set():
            return Outcome(index, task.goal, "interrupted", "not started: the user interrupted")
        if limit < 1:
            return Outcome(index, task.goal, "out_of_budget", "not started: no iterations left")
        child = self.parent.open(
            self.agent,
            title=f"delegated: {task.goal[:70]}",
            source="delegate",
            parent_id=self.parent.id,
            system=f"{system_prompt(settings.model_copy(update={'toolsets': toolsets}))}\n\n{CHILD_ROLE}",
            toolsets=toolsets,
            learns=True,  # not a fork: its turns count and are reviewed like any session's
        )
        child.depth, child.max_iterations, child.parent_budget = self.parent.depth + 1, limit, self.budget
        child.questions = self.parent.questions  # its questions (approvals) reach the user through ours
        try:
            forked = await asyncio.to_thread(self.agent.sandboxes.fork, self.parent.id, child.id)
            self.emit(
                ChildStart(
                    call_id=self.call_id,
                    child_id=child.id,
                    index=index,
                    goal=task.goal,
                    sandbox="fork" if forked else "fresh",
                )
            )
            try:
                outcome = await self._run(index, task, child, forked is not None)
                if task.return_ == "files" and outcome.status != "interrupted":
                    outcome.files = await asyncio.to_thread(self._copy_back, child.id, task)
            except Exception as exc:  # after its start, a child still ends with a status
                log.exception("delegate %s: task %d failed", self.call_id, index)
                outcome = Outcome(index, task.goal, "failed", f"{type(exc).__name__}: {exc}", child.id)
            self.emit(
                ChildEnd(
                    call_id=self.call_id,
                    child_id=child.id,
                    index=index,
                    status=outcome.status,
                    summary=outcome.summary,
                    iterations=outcome.iterations,
                    files=outcome.files,
                )
            )
            return outcome
        finally:
            await asyncio.to_thread(child.close)

    def _toolsets(self, task: Task) -> list[str]:
        """The caller's toolsets (or the task's choice among them) minus what a child may not have."""
        mine = sorted({tool.toolset for tool in self.parent.tools.values()})
        withheld = set(NEVER_INHERITED)
        if not may_delegate(self.agent.settings.agent.max_depth, self.parent.depth + 1):
            withheld.add("delegate")
        if task.toolsets is None:
            return [name for name in mine if name not in withheld]
        missing = sorted(set(task.toolsets) - set(mine))
        if missing:
            raise TaskRefused(
                f"toolset(s) {', '.join(missing)} are not yours to give (yours: {', '.join(mine)})"
            )
        return [name for name in task.toolsets if name not in withheld]

    async def _run(self, index: int, task: Task, child: Child, forked: bool) -> Outcome:
        errors: list[str] = []
        last_text: list[str] = []

        def forward(event: Event) -> None:
            if event.session_id == child.id:
                if isinstance(event, Error):
                    errors.append(event.message)
                if isinstance(event, AssistantMessage) and event.content:
                    last_text.append(event.content)
            if not event.delegate_call:  # a grandchild's events keep their own call
                event.delegate_call, event.depth = self.call_id, self.parent.depth + 1
            if not (event.type == "turn_end" and event.session_id == child.id):
                self.emit(event)

        self.parent.children.add(child)
        try:
            running = asyncio.ensure_future(child.run(_brief(task, forked), forward))
            await asyncio.sleep(0)  # the run has started: an interrupt from now on reaches it
            if self.cancelled.is_set():
                child.interrupt()
            timeout = self.agent.settings.agent.child_timeout
            done, _ = await asyncio.wait({running}, timeout=timeout)
            if not done:
                return await self._stop_hung(index, task, child, running, timeout)
            end = running.result()
        finally:
            self.parent.children.discard(child)
        status = STATUS[end.reason]
        summary = {
            "done": end.content,
            "failed": "; ".join(errors) or "the child failed without a message",
            "out_of_budget": "ran out of iterations" + (f"; last said: {last_text[-1]}" if last_text else ""),
            "interrupted": "interrupted by the user",
        }[status]
        return Outcome(index, task.goal, status, summary.strip() or "(no reply)", child.id, end.iterations)

    async def _stop_hung(
        self, index: int, task: Task, child: Child, running: asyncio.Future[TurnEnd], timeout: float
    ) -> Outcome:
        """A child past agent.child_timeout: interrupt it; if it still does not stop, close its sandbox."""
        child.interrupt()
        done, _ = await asyncio.wait({running}, timeout=GRACE)
        if not done:
            await asyncio.to_thread(child.close)  # a stuck sandbox call ends when its channel closes
            await asyncio.wait({running}, timeout=GRACE)
        summary = f"no result within {timeout:g} s (agent.child_timeout): it was stopped"
        return Outcome(index, task.goal, "failed", summary, child.id)

    def _copy_back(self, child_id: str, task: Task) -> str:
        """Copy the child's files at task.path into the caller's workspace under task.into."""
        sandboxes = self.agent.sandboxes
        source = sandboxes.peek(child_id)
        if source is None:
            return "nothing copied: the child never used its sandbox"
        into = PurePosixPath(str(task.into).rstrip("/"))
        scratch = tempfile.mkdtemp(prefix="hermetic-delegate-")
        try:
            local = source.download(task.path, scratch)
            if local.is_dir():  # its contents become `into`; a file goes into `into`
                local = local.rename(local.with_name(into.name))
                done = sandboxes.get(self.parent.id).upload(local, str(into.parent))
            else:
                done = sandboxes.get(self.parent.id).upload(local, str(into))
        except (SandboxError, OSError) as exc:
            return f"nothing copied: {exc}"
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return f"{done.get('files', 0)} file(s) and directories copied into {into}"


def _brief(task: Task, forked: bool) -> str:
    """The child's first (and only) user message."""
    parts = [task.goal]
    if task.context:
        parts.append(f"Context from the agent that delegated this task:\n{task.context}")
    parts.append(
        "Your sandbox starts as a copy of the delegating agent's workspace."
        if forked
        else "Your sandbox is new and empty: the delegating agent's files are not in it."
    )
    if task.return_ == "files":
        parts.append(f"When you finish, {task.path} in your workspace goes back to the delegating agent.")
    return "\n\n".join(parts)
