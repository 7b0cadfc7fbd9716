"""The database rows, which are also the records the store hands out, and the chat message they hold."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from sqlalchemy import JSON, Column, Index
from sqlmodel import Field, SQLModel

from .errors import StoreError

# none_as_null: a message without tool calls stores SQL NULL, not the JSON text 'null'.
_JSON = JSON(none_as_null=True)


class SessionRecord(SQLModel, table=True):
    """One conversation. The totals are kept up to date by every add_message."""

    __tablename__ = "sessions"
    __table_args__ = (Index("sessions_profile_activity", "profile", "updated_at"),)

    id: str = Field(primary_key=True)
    profile: str
    title: str | None = None
    source: str = "cli"
    model: str | None = None
    backend: str | None = None
    sandbox_id: str | None = None
    workspace: str | None = None
    """The host directory mounted as its sandbox's workspace (an editor's project over ACP), if any."""
    parent_id: str | None = Field(default=None, foreign_key="sessions.id", ondelete="SET NULL")
    created_at: float
    updated_at: float
    """Last activity: creation or the latest message."""
    ended_at: float | None = None
    message_count: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0


class EvalAttemptRecord(SQLModel, table=True):
    """An evaluation attempt's label on its session (source `eval`): which task, which attempt, the reward."""

    __tablename__ = "eval_attempts"

    session_id: str = Field(primary_key=True, foreign_key="sessions.id", ondelete="CASCADE")
    run: str
    """The run's id (its sandboxes' org.hermetic.eval label)."""
    task: str
    attempt: int
    reward: float
    passed: bool


class BindingRecord(SQLModel, table=True):
    """Which session an outside conversation is talking to (store/bindings.py)."""

    __tablename__ = "conversation_bindings"

    profile: str = Field(primary_key=True)
    surface: str = Field(primary_key=True)
    key: str = Field(primary_key=True)
    """The surface's name for the conversation (a chat key, a derived /v1 key, an A2A context id...)."""
    session_id: str
    started_at: float
    """When the key was bound to this session (a reset policy counts from it)."""
    last_at: float


class MessageRecord(SQLModel, table=True):
    """One chat message as it was sent to or received from the model."""

    __tablename__ = "messages"
    # AUTOINCREMENT: ids only grow, so `messages(after_id=...)` never sees a reused id.
    __table_args__ = (Index("messages_session", "session_id", "id"), {"sqlite_autoincrement": True})

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(foreign_key="sessions.id", ondelete="CASCADE")
    role: str
    content: str | None = None
    tool_calls: list[dict[str, Any]] | None = Field(default=None, sa_column=Column(_JSON))
    tool_call_id: str | None = None
    name: str | None = None
    created_at: float
    reasoning: str | None = None
    """An assistant message's reasoning as the provider sent it (`reasoning_content`); kept for the
    record and exports, not part of `to_chat` (providers refuse it sent back)."""
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None

    def to_chat(self) -> dict[str, Any]:
        """The message in OpenAI chat format, ready to send to the model again."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls is not None:
            out["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


class ToolCallRecord(SQLModel, table=True):
    """Audit row for one tool call: what ran, where, for how long, and how it ended."""

    __tablename__ = "tool_calls"
    __table_args__ = (Index("tool_calls_session", "session_id", "id"),)

    id: int | None = Field(default=None, primary_key=True)
    session_id: str = Field(foreign_key="sessions.id", ondelete="CASCADE")
    call_id: str
    tool: str
    arguments: Any = Field(sa_column=Column(_JSON))
    backend: str | None
    sandbox_id: str | None
    started_at: float
    duration_ms: float
    exit_code: int | None
    ok: bool
    error: str | None = None


class StoreMeta(SQLModel, table=True):
    """Key/value facts about the database itself: schema_version."""

    __tablename__ = "store_meta"

    key: str = Field(primary_key=True)
    value: str


class VectorIndexRecord(SQLModel, table=True):
    """One embedding model's vectors of the messages: which table holds them, and how far it has got.
    A query is embedded by the model and compared only with that model's table, so vectors never mix."""

    __tablename__ = "vector_indexes"

    model: str = Field(primary_key=True)
    table_name: str
    dim: int
    embedded_through: int = 0
    """The resumable cursor: every indexable message with an id up to this one has its vector."""
    created_at: float


class SearchHit(BaseModel):
    session_id: str
    message_id: int
    role: str
    snippet: str
    """The matching part of the message, matched terms between `>>>` and `<<<`."""
    score: float
    """Higher is better; comparable within one search only."""
    created_at: float
    session_title: str | None


class SessionRecall(SearchHit):
    """One past session found by `Store.recall`: its best hit, the messages around that hit, and the
    session's first and last exchanges (user and assistant messages with text; none repeated)."""

    session_created_at: float
    message_count: int
    window: list[MessageRecord]
    first: list[MessageRecord]
    last: list[MessageRecord]


class FunctionCall(BaseModel):
    name: str
    arguments: str


class ChatToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")  # providers add fields (index, ...); they are kept as given

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """The shape add_message accepts; checked before anything is written."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None


def message_row(message: Any, index: int) -> dict[str, Any]:
    """The columns for one chat-format message, checked first; tool_calls are stored exactly as given."""
    if not isinstance(message, dict):
        raise StoreError(f"message {index} is a {type(message).__name__}, not a chat-format dict")
    try:
        checked = ChatMessage.model_validate(message)
    except ValidationError as exc:
        raise StoreError(f"message {index} is not a chat-format message: {exc}") from None
    return {
        "role": checked.role,
        "content": checked.content,
        "tool_calls": message.get("tool_calls"),
        "tool_call_id": checked.tool_call_id,
        "name": checked.name,
    }
