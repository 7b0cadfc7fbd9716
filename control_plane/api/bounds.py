"""What every API router shares about input from outside: bounded field types (lengths, ranges, no NUL,
all in the OpenAPI document) and the error answers, each documented with its model.

A route declares its fields with these types and its errors with `errors(401, 404, ...)` (a router
of authenticated routes starts from `AUTHENTICATED`), so the document lists every status the route can
answer and a client (or a fuzzer) can rely on it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints

NO_NUL = r"^[^\x00]*$"
"""No NUL anywhere: PostgreSQL text cannot hold one, and C-string consumers (FTS5) stop at it."""
MAX_OFFSET = 1_000_000_000
"""Past any real history, and far below the 64-bit integers SQL takes."""


def _text(min_length: int, max_length: int) -> StringConstraints:
    return StringConstraints(min_length=min_length, max_length=max_length, pattern=NO_NUL)


Title = Annotated[str, _text(0, 200)]
MessageText = Annotated[str, _text(1, 200_000)]
"""What a user sends the agent in one message."""
SearchText = Annotated[str, _text(1, 1000)]
TokenText = Annotated[str, _text(1, 200)]
"""An API token as a user pastes it."""
AnswerText = Annotated[str, _text(1, 10_000)]
"""An answer to a question of a running turn (a choice, or free text)."""
RelativePath = Annotated[str, _text(1, 1024)]
SessionId = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
QuestionId = Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
SkillName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
]
SourceText = Annotated[str, _text(1, 4000)]
"""Where skills come from: a directory, an archive file or URL, a git repository[#REF][:SUBDIR], TAP/NAME."""
CurationLine = Annotated[str, _text(1, 1000)]
"""One change of a skill curation plan ("NAME: stale (unused for 40 days)")."""
FindingRef = Annotated[str, _text(1, 500)]
"""A threat finding accepted for an install: the finding's id, FILE:LINE, or "all"."""
Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET)]
Version = Annotated[int, Field(ge=1, le=MAX_OFFSET)]


class ErrorBody(BaseModel):
    """Every error but 422: what went wrong and, where there is one, what to do about it."""

    detail: str


DESCRIPTIONS = {
    400: "The request was refused (the message says why)",
    401: "No valid bearer token or console sign-in",
    403: "A cross-site request (its Origin is not this server)",
    404: "No such session, skill or tap in the token's profile",
    409: "A conflict with what is there now, or semantic search off or failing (the message says which)",
    429: "A limit of the profile is reached; retry after Retry-After seconds",
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route that can answer these error statuses (422 FastAPI documents itself)."""
    documented: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        documented[code] = {"model": ErrorBody, "description": DESCRIPTIONS[code]}
        if code == 429:
            documented[code]["headers"] = RETRY_AFTER
    return documented


def stream_errors(documented: dict[int | str, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of an event stream route: its errors are JSON, not events. Said so, or the
    document would list them as the stream's."""
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    return {code: {**answer, "content": body} for code, answer in documented.items()}


RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying", "schema": {"type": "integer"}}
}
"""The headers of a 429."""


AUTHENTICATED = errors(400, 401)
"""The `responses=` of a router whose routes take a bearer token (401) and may take a JSON body (400
when it cannot be parsed); each route adds its own (`responses=errors(404)`): route entries win."""
