"""The /v1 wire shapes, from OpenAI's API reference: what clients send (bounded, unknown fields ignored,
as OpenAI's own clients and front ends send many the agent does not use) and what they get back."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_TEXT = 200_000
"""Characters of one message's text (what POST /sessions/{id}/messages takes too)."""
MAX_TOTAL = 2_000_000
"""Characters of all the messages of one request."""
MAX_MESSAGES = 2_000
MAX_PARTS = 200
SESSION_HEADER = "X-Hermetic-Session"
"""Sent with every answer; a client that echoes it stays in that session whatever its history says."""

Text = Annotated[str, Field(max_length=MAX_TEXT)]
Name = Annotated[str, Field(max_length=256)]


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ImageURL(_Lenient):
    url: Text


class ContentPart(_Lenient):
    """A part of a message: text, or an image (input_text/input_image in the Responses API)."""

    type: Name
    text: Text | None = None
    image_url: ImageURL | Text | None = None


Content = Text | Annotated[list[ContentPart], Field(max_length=MAX_PARTS)] | None


def content_text(content: Content) -> str:
    """The text of a message. The agent reads text only, so an image becomes a line saying it was there."""
    if content is None or isinstance(content, str):
        return content or ""
    lines = []
    for part in content:
        if part.text is not None:
            lines.append(part.text)
        elif part.image_url is not None:
            url = part.image_url if isinstance(part.image_url, str) else part.image_url.url
            where = "inline data" if url.startswith("data:") else url[:500]
            lines.append(f"[an image was attached ({where}); this agent cannot see images]")
    return "\n".join(lines)


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Content = None


class ChatRequest(_Lenient):
    """POST /v1/chat/completions. temperature, user, stop, tools, ... are accepted and ignored."""

    model: Name
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    stream: bool = False

    @model_validator(mode="after")
    def _bounded(self) -> ChatRequest:
        _check_total(self.messages)
        return self


class InputItem(_Lenient):
    type: Literal["message"] = "message"
    role: Literal["system", "developer", "user", "assistant"] = "user"
    content: Content = None


class ResponsesRequest(_Lenient):
    """POST /v1/responses."""

    model: Name
    input: Text | Annotated[list[InputItem], Field(min_length=1, max_length=MAX_MESSAGES)]
    instructions: Text | None = None
    previous_response_id: Name | None = None
    """Continue the session of that response."""
    stream: bool = False

    @model_validator(mode="after")
    def _bounded(self) -> ResponsesRequest:
        if isinstance(self.input, list):
            _check_total(self.input)
        return self

    def messages(self) -> list[ChatMessage]:
        """The input as chat messages (instructions first), so both routes read a history one way."""
        items = [InputItem(content=self.input)] if isinstance(self.input, str) else self.input
        head = [ChatMessage(role="system", content=self.instructions)] if self.instructions else []
        return head + [ChatMessage(role=item.role, content=item.content) for item in items]


def _check_total(messages: list[ChatMessage] | list[InputItem]) -> None:
    total = sum(len(content_text(m.content)) for m in messages)
    if total > MAX_TOTAL:
        raise ValueError(f"the messages hold {total:,} characters; at most {MAX_TOTAL:,}")


# -- what the client gets back ---------------------------------------------------------------


class CompletionUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class AssistantReply(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class Choice(BaseModel):
    index: int = 0
    message: AssistantReply
    finish_reason: Literal["stop", "length"]


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: CompletionUsage


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta = Delta()
    finish_reason: Literal["stop", "length"] | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None
    hermetic: dict[str, Any] | None = None
    """On a `hermetic.tool` event: the tool event (tool_start, tool_progress, tool_end)."""


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "hermetic"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = []


class OutputMessage(BaseModel):
    type: Literal["message"] = "message"
    id: str
    status: Literal["completed"] = "completed"
    role: Literal["assistant"] = "assistant"
    content: list[OutputText]


class ResponseUsage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0


class Response(BaseModel):
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["in_progress", "completed", "incomplete"]
    model: str
    output: list[OutputMessage]
    usage: ResponseUsage
    previous_response_id: str | None = None


class OpenAIError(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorEnvelope(BaseModel):
    error: OpenAIError
