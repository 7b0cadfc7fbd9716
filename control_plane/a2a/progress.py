"""A run's events as one A2A task's updates. The agent's text streams into the `reply` artifact (chunks
appended as the model writes them; deltas that reached the task together go as one chunk, since the
SDK saves the whole task on each); tool calls, their output, notices and plans are `working` status
updates, each a line of text and the Hermetic event itself as a data part; the turn's end is the task's
final state, its message the final answer. One `Progress` per task execution."""

from __future__ import annotations

from a2a.helpers.proto_helpers import new_data_part, new_text_part
from a2a.server.tasks import TaskUpdater
from a2a.types import Message, Part, TaskState

from ..agent.display import describe_call
from ..events import (
    AssistantMessage,
    ChildEnd,
    ChildStart,
    Error,
    Event,
    Notice,
    Question,
    TextDelta,
    Todo,
    ToolEnd,
    ToolProgress,
    ToolStart,
    TurnEnd,
)
from .files import MAX_FILE, MAX_TOTAL, Written

REPLY = "reply"
"""The artifact holding everything the agent wrote in the task, as it streams."""
LINE = 2000
"""At most this much of a tool's output or result in one status line (the data part has it whole)."""
FINAL: dict[str, TaskState] = {
    "done": TaskState.TASK_STATE_COMPLETED,
    "interrupted": TaskState.TASK_STATE_CANCELED,
    "budget": TaskState.TASK_STATE_FAILED,
    "error": TaskState.TASK_STATE_FAILED,
}


class Progress:
    def __init__(self, updater: TaskUpdater) -> None:
        self.updater = updater
        self._said = False
        """The reply has text (sent, or pending)."""
        self._sent = False
        """The reply artifact exists."""
        self._pending: list[str] = []
        """Text said and not sent yet: the deltas of one batch of the run's events."""
        self._step_said = False
        """The model step going on streamed text (its AssistantMessage repeats it)."""
        self._problem = ""
        """The last error or notice, said when the turn ends without an answer."""

    async def show(self, event: Event) -> None:
        """Send what `event` means to the task; a child's events are left to its parent's delegate call.
        Text waits for `flush` (the caller's batch of events is done) or the next event that is not."""
        if event.delegate_call:
            return
        if isinstance(event, TextDelta):
            self._say(event.text)
            return
        await self.flush()
        if isinstance(event, AssistantMessage):
            if event.content and not self._step_said:  # a reply that was not streamed
                self._say(event.content)
                await self.flush()
            self._step_said = False
        elif isinstance(event, Error | Notice):
            self._problem = event.message
            await self._working(event.message, event)
        elif line := _line(event):
            await self._working(line, event)

    async def flush(self) -> None:
        """Send the text said since the last flush, as one chunk of the reply."""
        if not self._pending:
            return
        text, self._pending = "".join(self._pending), []
        await self.updater.add_artifact([new_text_part(text)], REPLY, name=REPLY, append=self._sent)
        self._sent = True

    async def ask(self, question: Question) -> None:
        """The run waits on `question`: the task needs input, the next message in it is the answer."""
        await self.flush()
        choices = f" (answer one of: {', '.join(question.choices)})" if question.choices else ""
        await self.updater.requires_input(self._message(question.prompt + choices, question))

    async def files(self, written: list[Written], session_id: str) -> None:
        """An artifact `file:PATH` per file the task wrote; the `files` artifact names those over the
        bounds, with where to download them."""
        await self.flush()
        for file in written:
            if file.data is not None:
                parts = [file.part()]
                await self.updater.add_artifact(parts, f"file:{file.path}", name=file.path, last_chunk=True)
        over = [
            f"{file.path}: {file.size} bytes, over the bounds ({MAX_FILE} a file, {MAX_TOTAL} a task): "
            f"GET /sessions/{session_id}/files/download?path={file.path}"
            for file in written
            if file.data is None
        ]
        if over:
            listed = [new_text_part("\n".join(over))]
            await self.updater.add_artifact(listed, "files", name="files", last_chunk=True)

    async def end(self, end: TurnEnd) -> None:
        """The task's final state: completed with the answer, canceled, or failed with the reason."""
        await self.flush()
        if self._said:
            await self.updater.add_artifact([new_text_part("")], REPLY, append=True, last_chunk=True)
        elif end.content:
            await self.updater.add_artifact([new_text_part(end.content)], REPLY, name=REPLY, last_chunk=True)
        text = end.content if end.reason == "done" else self._problem or f"the run ended: {end.reason}"
        await self.updater.update_status(FINAL[end.reason], self._message(text or "(no answer)", end))

    def _say(self, text: str) -> None:
        if self._said and not self._step_said:  # a new step's text: a paragraph of its own
            text = "\n\n" + text
        self._pending.append(text)
        self._said = self._step_said = True

    async def _working(self, line: str, event: Event) -> None:
        await self.updater.update_status(TaskState.TASK_STATE_WORKING, self._message(line, event))

    def _message(self, text: str, event: Event) -> Message:
        parts: list[Part] = [new_text_part(text), new_data_part(event.model_dump(mode="json"))]
        return self.updater.new_agent_message(parts)


def _line(event: Event) -> str:
    """One line for a progress event; empty for the events a task does not show (usage, answers)."""
    if isinstance(event, ToolStart):
        return describe_call(event.name, event.arguments)
    if isinstance(event, ToolProgress):
        return event.text[-LINE:]
    if isinstance(event, ToolEnd):
        return f"{event.name} {'ok' if event.ok else 'failed'}: {event.result[:LINE]}"
    if isinstance(event, Todo):
        return "plan: " + "; ".join(f"[{item.status}] {item.content}" for item in event.items)
    if isinstance(event, ChildStart):
        return f"delegated task {event.index}: {event.goal}"
    if isinstance(event, ChildEnd):
        return f"delegated task {event.index} {event.status}: {event.summary[:LINE]}"
    return ""
