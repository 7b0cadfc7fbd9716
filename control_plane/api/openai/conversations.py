"""Which session a /v1 request belongs to, and the turn it starts there.

A chat front end sends the whole history every time. Its conversation keeps one session (and so one
sandbox) by the session header it echoes, or else by a key derived from its system prompt and first
user message; only the messages after the last assistant reply are new. The keys are the store's
bindings (store/bindings.py), so a conversation survives a server restart.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from fastapi import HTTPException, Request, status
from pydantic import ValidationError

from ...events import Error, Event
from ..profiles import LiveSession, Profile
from .wire import ChatMessage, ChatRequest, ResponsesRequest, content_text

KEPT_KEYS = 10_000
"""Conversation keys remembered per profile (the least recently used are forgotten first)."""


def conversation_key(profile: str, messages: list[ChatMessage]) -> str:
    system = "\n".join(content_text(m.content) for m in messages if m.role in ("system", "developer"))
    first = next((content_text(m.content) for m in messages if m.role == "user"), "")
    return hashlib.sha256(json.dumps([profile, system, first]).encode()).hexdigest()


def new_input(messages: list[ChatMessage]) -> tuple[str, list[ChatMessage]]:
    """The user text after the last assistant reply, and the rest (the history, the client's instructions).
    400 when there is no such text."""
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    fresh = [content_text(m.content) for m in messages[last + 1 :] if m.role == "user"]
    text = "\n\n".join(t for t in fresh if t)
    if not text.strip():
        raise HTTPException(status.HTTP_400_BAD_REQUEST, "the last messages must include the user's text")
    earlier = [m for i, m in enumerate(messages) if i <= last or m.role != "user"]
    return text, earlier


def transcript(earlier: list[ChatMessage]) -> str:
    """What a new session is told about a history it did not see (the client's instructions, turns)."""
    lines = []
    for message in earlier:
        text = content_text(message.content)
        if not text:
            continue
        who = {"system": "instructions", "developer": "instructions"}.get(message.role, message.role)
        lines.append(f"[{who}] {text}")
    if not lines:
        return ""
    return "This conversation began in a chat client; what was said so far:\n" + "\n".join(lines) + "\n\n"


def session_of_response(response_id: str) -> str:
    """A response id carries its session: resp_<session id>_<random>."""
    head, _, session = response_id.partition("_")
    session = session.rpartition("_")[0]
    if head != "resp" or not session:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no response {response_id!r}")
    return session


TURNS = ("/v1/chat/completions", "/v1/responses")
"""The /v1 routes whose request may continue a session (the others hold none)."""


def continued_session(profile: Profile, path: str, header: str | None, body: bytes) -> str | None:
    """The existing session a /v1 turn request continues, for sending it to the replica holding that
    session: by the session header, the chat's conversation key or the previous response id. None for a
    new conversation, or a request its route refuses anyway (an invalid body, an unknown response id)."""
    try:
        if path == "/v1/responses":
            previous = ResponsesRequest.model_validate_json(body).previous_response_id
            return session_of_response(previous) if previous else None
        if header is not None:
            return header
        messages = ChatRequest.model_validate_json(body).messages
    except (ValidationError, HTTPException):
        return None
    known = profile.agent.bindings.get("openai", conversation_key(profile.settings.profile, messages))
    return known.session_id if known is not None else None


def open_session(profile: Profile, session_id: str | None, title: str) -> tuple[LiveSession, bool]:
    """The session by id (404 when not this profile's), or a new one. Returns it and whether it is new."""
    if session_id is not None:
        return profile.session(session_id), False
    conversation = profile.agent.new_conversation(title=title[:80] or None, source="openai")
    return profile.open_session(conversation), True


def chat_session(
    profile: Profile, messages: list[ChatMessage], header: str | None
) -> tuple[LiveSession, str]:
    """The session of a chat request and the text of its turn."""
    text, earlier = new_input(messages)
    key = None
    session_id = header
    if session_id is None:
        key = conversation_key(profile.settings.profile, messages)
        known = profile.agent.bindings.get("openai", key)
        if known is not None and profile.agent.store.get_session(known.session_id, profile.settings.profile):
            session_id = known.session_id
    first = next((content_text(m.content) for m in messages if m.role == "user"), text)
    live, new = open_session(profile, session_id, first)
    if key is not None and new:
        profile.agent.bindings.bind("openai", key, live.conversation.id, keep=KEPT_KEYS)
    if new:  # a new session for a history it did not see: it hears it once, as context
        text = transcript(earlier) + text
    return live, text


@dataclass
class Outcome:
    text: str = ""
    reason: str = "done"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: Error | None = None


def start_turn(profile: Profile, live: LiveSession, text: str) -> int:
    """Start a run in the session; the number to follow its events after. 409 while one runs, 429 over
    the profile's limits (as POST /sessions/{id}/messages)."""
    if live.conversation.running or (live.task is not None and not live.task.done()):
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"session {live.conversation.id} is already answering; wait for it"
        )
    profile.admit_run(live)
    after = live.seq
    live.task = asyncio.create_task(live.conversation.run(text, live.publish))
    return after


async def turn_events(live: LiveSession, after: int, outcome: Outcome) -> AsyncIterator[Event]:
    """The run's events up to its turn_end, totalled into `outcome`. A consumer that leaves early (a
    client gone) interrupts the run, and with it the sandbox's commands."""
    ended = False
    try:
        async for _, event in live.follow(after):
            if event.type == "usage":
                outcome.prompt_tokens += event.prompt_tokens
                outcome.completion_tokens += event.completion_tokens
            elif event.type == "error" and event.kind in ("model", "config", "internal"):
                outcome.error = event
            elif event.type == "turn_end":
                outcome.text, outcome.reason = event.content, event.reason
                ended = True
            yield event
            if ended:
                return
    finally:
        if not ended:
            live.conversation.interrupt()


async def whole_turn(live: LiveSession, after: int, request: Request) -> Outcome:
    """The run to its end, for an answer sent in one piece; a client that hangs up first interrupts it,
    as a streaming client does."""
    outcome = Outcome()

    async def consume() -> None:
        async for _ in turn_events(live, after, outcome):
            pass

    turn = asyncio.ensure_future(consume())
    gone = asyncio.ensure_future(_hung_up(request))
    await asyncio.wait({turn, gone}, return_when=asyncio.FIRST_COMPLETED)
    gone.cancel()
    if not turn.done():
        turn.cancel()  # turn_events interrupts the run as it is left
        await asyncio.gather(turn, return_exceptions=True)
    return outcome


async def _hung_up(request: Request) -> None:
    """Returns when the client disconnects (the body is read: the next ASGI message can only be that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
