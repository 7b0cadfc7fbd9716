"""The /v1 routes: models, chat completions (plain and SSE), responses. Errors in OpenAI's envelope.

Streaming follows OpenAI's chunk sequence (a role chunk, content chunks, a final chunk with
finish_reason and usage, then `data: [DONE]`). Tool activity goes out as `event: hermetic.tool`
whose data is still a valid chunk (an empty delta, the tool event under `hermetic`): the official
`openai` client parses every unnamed-or-named event as a chunk, so a bare tool event would break it.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.routing import APIRoute
from fastapi.sse import format_sse_event
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response as StarletteResponse

from ..bounds import RETRY_AFTER
from ..methods import allowed_methods
from ..profiles import Auth, LiveSession, Profile
from .conversations import (
    Outcome,
    chat_session,
    new_input,
    open_session,
    session_of_response,
    start_turn,
    transcript,
    turn_events,
    whole_turn,
)
from .wire import (
    DONE,
    SESSION_HEADER,
    TOOL_EVENT,
    AssistantReply,
    ChatCompletion,
    ChatCompletionChunk,
    ChatRequest,
    Choice,
    ChunkChoice,
    CompletionUsage,
    Delta,
    ErrorEnvelope,
    Model,
    ModelList,
    Name,
    OpenAIError,
    OutputMessage,
    OutputText,
    Response,
    ResponseEventType,
    ResponsesRequest,
    ResponseUsage,
    chat_stream_content,
    responses_stream_content,
)

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "conflict_error",
    429: "rate_limit_error",
    502: "server_error",
    503: "server_error",
}


def error_response(
    status_code: int, message: str, code: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = OpenAIError(
        message=message, type=_ERROR_TYPES.get(status_code, "invalid_request_error"), code=code
    )
    return JSONResponse(ErrorEnvelope(error=body).model_dump(), status_code=status_code, headers=headers)


class OpenAIRoute(APIRoute):
    """A route whose validation and HTTP errors answer in OpenAI's envelope (400 for a bad body, as
    OpenAI does, not FastAPI's 422). Starlette's HTTPException is caught, not only FastAPI's subclass:
    FastAPI raises Starlette's for a body it cannot parse."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, StarletteResponse]]:
        handler = super().get_route_handler()

        async def enveloped(request: Request) -> StarletteResponse:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in err['loc'][1:]) or 'body'}: {err['msg']}"
                    for err in exc.errors()[:10]
                )
                return error_response(400, f"invalid request: {problems}", "invalid_request")
            except StarletteHTTPException as exc:
                code = {
                    401: "invalid_api_key",
                    404: "not_found",
                    409: "session_busy",
                    429: "rate_limit_exceeded",
                }.get(exc.status_code)
                return error_response(exc.status_code, str(exc.detail), code, headers=exc.headers)

        return enveloped


_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorEnvelope, "description": text}
    for code, text in {
        400: "The body is not a valid request",
        401: "No valid bearer token",
        403: "A browser Origin not in openai.allowed_origins",
        404: "No such session (header or previous_response_id)",
        409: "The session is answering another request",
        429: "A limit of the profile is reached; retry after Retry-After seconds",
        502: "The model failed",
        503: "No model is configured",
    }.items()
}
"""Every /v1 route's documented errors (the router's default), all in OpenAI's envelope."""
_ERRORS[429]["headers"] = RETRY_AFTER
router = APIRouter(prefix="/v1", tags=["openai"], route_class=OpenAIRoute, responses=_ERRORS)
_STREAMED = "The answer; with `stream: true` as server-sent events (text/event-stream)"


def v1_profile(request: Request, profile: Auth) -> Profile:
    """The caller's profile; a browser page from an origin the profile does not allow is refused."""
    origin = request.headers.get("origin")
    if origin is not None and origin not in profile.settings.openai.allowed_origins:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"origin {origin!r} is not allowed (openai.allowed_origins)"
        )
    return profile


V1 = Annotated[Profile, Depends(v1_profile)]


@router.get("/models")
def list_models(profile: V1) -> ModelList:
    """The profile's agent, as one model."""
    return ModelList(data=[Model(id=profile.settings.openai.model_id, created=int(time.time()))])


@router.get("/models/{model_id}")
def get_model(profile: V1, model_id: Annotated[Name, Path()]) -> Model:
    if model_id != profile.settings.openai.model_id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no model {model_id!r}")
    return Model(id=model_id, created=int(time.time()))


def _failure(outcome: Outcome, session: str) -> JSONResponse | None:
    if outcome.reason != "error" or outcome.error is None:
        return None
    config = outcome.error.kind == "config"
    return error_response(
        503 if config else 502,
        outcome.error.message,
        "model_not_configured" if config else "model_error",
        headers={SESSION_HEADER: session},
    )


@router.post(
    "/chat/completions",
    response_model=ChatCompletion,
    responses={200: {"description": _STREAMED, "content": chat_stream_content()}},
)
async def chat_completions(
    request: Request,
    profile: V1,
    body: ChatRequest,
    session: Annotated[str | None, Header(alias=SESSION_HEADER, max_length=64)] = None,
) -> StarletteResponse:
    """The agent answers the newest user message; `stream: true` for SSE (text/event-stream)."""
    live, text = chat_session(profile, body.messages, session)
    after = start_turn(profile, live, text)
    headers = {SESSION_HEADER: live.conversation.id}
    if body.stream:
        return StreamingResponse(
            _chat_stream(live, after, body.model), media_type="text/event-stream", headers=headers
        )
    outcome = await whole_turn(live, after, request)
    failed = _failure(outcome, live.conversation.id)
    if failed is not None:
        return failed
    completion = ChatCompletion(
        id=f"chatcmpl-{secrets.token_hex(12)}",
        created=int(time.time()),
        model=body.model,
        choices=[Choice(message=AssistantReply(content=outcome.text), finish_reason=_finish(outcome))],
        usage=_usage(outcome),
    )
    return JSONResponse(completion.model_dump(mode="json"), headers=headers)


async def _chat_stream(live: LiveSession, after: int, model: str) -> AsyncIterator[bytes]:
    outcome = Outcome()
    head = {"id": f"chatcmpl-{secrets.token_hex(12)}", "created": int(time.time()), "model": model}

    def chunk(event: str | None = None, **fields: Any) -> bytes:
        data = ChatCompletionChunk(**head, **fields).model_dump_json(exclude_none=True)
        return format_sse_event(data_str=data, event=event)

    yield chunk(choices=[ChunkChoice(delta=Delta(role="assistant", content=""))])
    written = after_tool = False
    async for event in turn_events(live, after, outcome):
        if event.type == "text_delta":
            text = event.text if not (written and after_tool) else "\n\n" + event.text
            written, after_tool = True, False
            yield chunk(choices=[ChunkChoice(delta=Delta(content=text))])
        elif event.type in ("tool_start", "tool_progress", "tool_end"):
            after_tool = True
            yield chunk(TOOL_EVENT, choices=[ChunkChoice()], hermetic=event.model_dump(mode="json"))
    if outcome.reason == "error" and outcome.error is not None:
        error = OpenAIError(
            message=outcome.error.message, type="server_error", code=f"{outcome.error.kind}_error"
        )
        yield format_sse_event(data_str=json.dumps({"error": error.model_dump()}))
    else:
        yield chunk(choices=[ChunkChoice(finish_reason=_finish(outcome))], usage=_usage(outcome))
    yield format_sse_event(data_str=DONE)


def _finish(outcome: Outcome) -> Any:
    return "length" if outcome.reason == "budget" else "stop"


def _usage(outcome: Outcome) -> CompletionUsage:
    total = outcome.prompt_tokens + outcome.completion_tokens
    return CompletionUsage(
        prompt_tokens=outcome.prompt_tokens, completion_tokens=outcome.completion_tokens, total_tokens=total
    )


@router.post(
    "/responses",
    response_model=Response,
    responses={200: {"description": _STREAMED, "content": responses_stream_content()}},
)
async def responses(request: Request, profile: V1, body: ResponsesRequest) -> StarletteResponse:
    """One turn; `previous_response_id` continues that response's session, without it a new session.
    `stream: true` sends the Responses API's events (response.created, response.output_text.delta, ...,
    response.completed) as SSE."""
    text, earlier = new_input(body.messages())
    session_id = session_of_response(body.previous_response_id) if body.previous_response_id else None
    live, new = open_session(profile, session_id, text)
    if new:  # like a chat's first message: the history it brings is told once, as context
        text = transcript(earlier) + text
    after = start_turn(profile, live, text)
    ids = (f"resp_{live.conversation.id}_{secrets.token_hex(6)}", f"msg_{secrets.token_hex(12)}")
    headers = {SESSION_HEADER: live.conversation.id}
    if body.stream:
        return StreamingResponse(
            _responses_stream(live, after, body, ids), media_type="text/event-stream", headers=headers
        )
    outcome = await whole_turn(live, after, request)
    failed = _failure(outcome, live.conversation.id)
    if failed is not None:
        return failed
    response = _response(ids, body, outcome.text, outcome)
    return JSONResponse(response.model_dump(mode="json"), headers=headers)


def _response(
    ids: tuple[str, str], body: ResponsesRequest, text: str, outcome: Outcome, done: bool = True
) -> Response:
    ended = "incomplete" if outcome.reason in ("budget", "interrupted") else "completed"
    return Response(
        id=ids[0],
        created_at=int(time.time()),
        status=ended if done else "in_progress",
        model=body.model,
        output=[OutputMessage(id=ids[1], content=[OutputText(text=text)])] if done else [],
        usage=ResponseUsage(
            input_tokens=outcome.prompt_tokens,
            output_tokens=outcome.completion_tokens,
            total_tokens=outcome.prompt_tokens + outcome.completion_tokens,
        ),
        previous_response_id=body.previous_response_id,
    )


async def _responses_stream(
    live: LiveSession, after: int, body: ResponsesRequest, ids: tuple[str, str]
) -> AsyncIterator[bytes]:
    outcome = Outcome()
    numbers = itertools.count()
    item = {"item_id": ids[1], "output_index": 0, "content_index": 0}

    def event(kind: ResponseEventType, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": next(numbers), **fields}
        return format_sse_event(data_str=json.dumps(data), event=kind)

    def response(text: str, done: bool) -> dict[str, Any]:
        return _response(ids, body, text, outcome, done).model_dump(mode="json")

    yield event("response.created", response=response("", False))
    message = {"type": "message", "id": ids[1], "role": "assistant"}
    yield event(
        "response.output_item.added", output_index=0, item={**message, "status": "in_progress", "content": []}
    )
    yield event(
        "response.content_part.added", **item, part={"type": "output_text", "text": "", "annotations": []}
    )
    text = ""
    async for step in turn_events(live, after, outcome):
        if step.type == "text_delta":
            text += step.text
            yield event("response.output_text.delta", **item, delta=step.text, logprobs=[])
        elif step.type in ("tool_start", "tool_progress", "tool_end"):
            yield event(TOOL_EVENT, hermetic=step.model_dump(mode="json"))
    if outcome.reason == "error" and outcome.error is not None:
        yield event("error", code=f"{outcome.error.kind}_error", message=outcome.error.message, param=None)
        return
    part = {"type": "output_text", "text": text, "annotations": []}
    yield event("response.output_text.done", **item, text=text, logprobs=[])
    yield event("response.content_part.done", **item, part=part)
    yield event(
        "response.output_item.done",
        output_index=0,
        item={**message, "status": "completed", "content": [part]},
    )
    yield event("response.completed", response=response(text, True))


@router.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"], include_in_schema=False)
def unknown(request: Request, path: str) -> StarletteResponse:
    """A /v1 path this server does not serve (404), or one it serves with other methods (405, `Allow`
    listing them): this route matches every /v1 path, so Starlette's own 405 never comes."""
    allow = allowed_methods(request.app.router.routes, request.scope)
    if allow:
        return error_response(
            405,
            f"{request.method} is not allowed on /v1/{path} (allowed: {', '.join(allow)})",
            "method_not_allowed",
            headers={"Allow": ", ".join(allow)},
        )
    raise HTTPException(
        status.HTTP_404_NOT_FOUND, f"/v1/{path} is not served here (models, chat/completions, responses)"
    )
