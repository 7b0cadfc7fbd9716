"""The typed event stream of a run: what the CLI prints, the API streams over SSE and the log records.

Every event has a `type` tag; `Event` is the union, so `EventAdapter.validate_python(d)` parses one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter


class _Event(BaseModel):
    session_id: str = ""
    delegate_call: str = ""
    """Set on the events of a child agent's session, forwarded on its parent's stream: the parent's
    delegate call (`ToolStart.call_id`) the child works for. Empty for the session's own events."""
    depth: int = 0
    """0 for the user's own session, 1 for its children, 2 for theirs."""


class TextDelta(_Event):
    """A piece of the model's reply as it streams."""

    type: Literal["text_delta"] = "text_delta"
    text: str


class ReasoningDelta(_Event):
    """A piece of the model's reasoning as it streams, when its provider sends one (`reasoning_content`:
    DeepSeek, vLLM and other servers of reasoning models). The whole is kept with the stored message."""

    type: Literal["reasoning_delta"] = "reasoning_delta"
    text: str


class AssistantMessage(_Event):
    """The model's complete reply of one step (its text and the tools it calls)."""

    type: Literal["assistant_message"] = "assistant_message"
    content: str
    tool_calls: list[dict[str, Any]] = []
    model: str = ""


class ToolStart(_Event):
    type: Literal["tool_start"] = "tool_start"
    call_id: str
    name: str
    arguments: dict[str, Any] | str
    """The parsed arguments, or the raw text when they were not valid JSON."""


class ToolProgress(_Event):
    """Output of a running tool (a terminal command's output as it arrives)."""

    type: Literal["tool_progress"] = "tool_progress"
    call_id: str
    text: str


class ToolImage(BaseModel):
    """An image a tool returned beside its text (a screenshot, a figure), already bounded and re-encoded
    (tools/images.py). Shown to a vision model, as MCP image content, in /v1 streams and chats; the stored
    history and the run log keep only `label`."""

    mime: Literal["image/png", "image/jpeg"]
    data: str = ""
    """The image, base64 (empty in the run log, which keeps the label only)."""
    label: str
    """What it is and where it is kept, e.g. `figures/figure-1.png (PNG 640x480)`."""
    to_model: bool = True
    """False: the tool's own model call has looked at it (the vision tools); only surfaces show it."""

    @property
    def data_url(self) -> str:
        return f"data:{self.mime};base64,{self.data}"


class ToolEnd(_Event):
    type: Literal["tool_end"] = "tool_end"
    call_id: str
    name: str
    ok: bool
    """False when the tool failed (bad arguments, unknown tool, an error, a non-zero exit)."""
    result: str
    """What the model sees: truncated and redacted."""
    duration_ms: float
    exit_code: int | None = None
    images: list[ToolImage] = []
    """The images the tool returned (at most tools/images.py MAX_IMAGES)."""


class Usage(_Event):
    """Tokens and cost of one model call."""

    type: Literal["usage"] = "usage"
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None
    """US dollars as litellm prices the model; None when it does not know the model's price."""


class Notice(_Event):
    """Something the user should know that is not an error: a retry, a fallback, a recreated sandbox."""

    type: Literal["notice"] = "notice"
    message: str


class UserMessage(_Event):
    """A user message entering the conversation (the first of a turn, or a steer mid-run)."""

    type: Literal["user_message"] = "user_message"
    content: str
    steer: bool = False


class Error(_Event):
    type: Literal["error"] = "error"
    message: str
    kind: str = "error"
    """model (no model answered), config (nothing to call), sandbox, internal."""


QuestionKind = Literal["approval", "clarify"]


class Question(_Event):
    """The run waits for the user: an approval (a host for the sandbox's allowlist, an exposed port)
    or a clarifying question. Answer it by id (`Conversation.answer`, the API, a chat button); no
    answer within `timeout_s` counts as no."""

    type: Literal["question"] = "question"
    id: str
    kind: QuestionKind
    prompt: str
    choices: list[str] = []
    """The answers allowed (for an approval: once, always, no); empty means free text."""
    timeout_s: float
    detail: dict[str, str] = {}
    """What the question is about, for a surface to render (host, port, reason)."""


class Answered(_Event):
    """A question was answered, timed out, or ended by an interrupt (answer None)."""

    type: Literal["answered"] = "answered"
    id: str
    answer: str | None
    by: Literal["user", "timeout", "interrupt", "nobody"]
    """nobody: no one can answer here (`hermetic run` without a terminal)."""


ChildStatus = Literal["done", "failed", "out_of_budget", "interrupted"]


class ChildStart(_Event):
    """A delegate call started a child agent: its own session and sandbox. Its events follow, each
    with `delegate_call` set to `call_id` and `session_id` the child's."""

    type: Literal["child_start"] = "child_start"
    call_id: str
    """The parent's delegate call."""
    child_id: str
    """The child's session."""
    index: int
    """The task's place in the call's batch, from 1."""
    goal: str
    sandbox: Literal["fork", "fresh"]
    """fork: a copy of the parent's sandbox; fresh: a new, empty one."""


class ChildEnd(_Event):
    """A child agent finished; `summary` is all its parent sees of its work."""

    type: Literal["child_end"] = "child_end"
    call_id: str
    child_id: str
    index: int
    status: ChildStatus
    summary: str
    iterations: int = 0
    files: str = ""
    """What came back into the parent's workspace (return: files), or why nothing did."""


TodoStatus = Literal["pending", "in_progress", "done"]


class TodoItem(BaseModel):
    id: str = Field(min_length=1, max_length=40, description="A short stable id, e.g. '1' or 'tests'.")
    content: str = Field(min_length=1, max_length=500, description="What this step does.")
    status: TodoStatus = Field("pending", description="pending, in_progress or done.")


class Todo(_Event):
    """The agent's plan changed (the todo tool): the whole plan, in order."""

    type: Literal["todo"] = "todo"
    items: list[TodoItem]


class TurnEnd(_Event):
    """The run for one user message is over; the session stays open for the next."""

    type: Literal["turn_end"] = "turn_end"
    reason: Literal["done", "interrupted", "budget", "error"]
    content: str = ""
    """The final reply's text."""
    iterations: int = 0


Event = Annotated[
    TextDelta
    | ReasoningDelta
    | AssistantMessage
    | ToolStart
    | ToolProgress
    | ToolEnd
    | Usage
    | Notice
    | UserMessage
    | Error
    | Question
    | Answered
    | ChildStart
    | ChildEnd
    | Todo
    | TurnEnd,
    Field(discriminator="type"),
]
EventAdapter: TypeAdapter[Event] = TypeAdapter(Event)
