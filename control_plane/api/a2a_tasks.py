"""The A2A side of a run: the SDK's `AgentExecutor` over the API's live sessions. An A2A context is a
Hermetic session (bound in the profile's conversation keys, so it survives a restart); a message starts a
turn there exactly as POST /sessions/{id}/messages does, and the turn's events become the task's
updates (progress.py).

A question of the run (an approval, a clarification) parks the task in `input-required`: `execute`
returns, the run keeps waiting, and the next message of that task is the answer. Cancel interrupts the
run: its model call, its sandbox commands and its open questions.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.utils.errors import InvalidParamsError
from fastapi import HTTPException
from pydantic import TypeAdapter, ValidationError

from ..a2a.files import Listing, listing, written
from ..a2a.progress import Progress
from ..events import Question, TurnEnd
from .bounds import MessageText
from .profiles import LiveSession, Profile

log = logging.getLogger(__name__)
TEXT: TypeAdapter[str] = TypeAdapter(MessageText)
"""A message's text is bounded as POST /sessions/{id}/messages bounds it."""
KEPT_CONTEXTS = 10_000
"""A2A contexts whose session is remembered per profile (the least recently bound are forgotten first)."""
STOP_WAIT = 60.0
"""Seconds a cancel waits for the run to wind down (its commands are interrupted, not waited out)."""


@dataclass
class _Parked:
    """A task waiting for its next message to answer the run's question."""

    live: LiveSession
    seq: int
    """The question's event number: following resumes after it."""
    question: Question
    before: Listing
    """The workspace's files when the task began (what it wrote is sent when it ends)."""


class HermeticExecutor(AgentExecutor):
    def __init__(self) -> None:
        self._parked: dict[str, _Parked] = {}

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        profile: Profile = context.call_context.state["profile"]
        assert context.task_id is not None and context.context_id is not None and context.message
        try:
            text = TEXT.validate_python(context.get_user_input())
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"]
            raise InvalidParamsError(message=f"the message's text parts: {problem}") from None
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        progress = Progress(updater)
        parked = self._parked.pop(context.task_id, None)
        if parked is not None:
            live, after, before = parked.live, parked.seq, parked.before
            try:
                answered = live.conversation.answer(parked.question.id, text)
            except ValueError as exc:  # not one of its choices: asked again
                self._parked[context.task_id] = parked
                await updater.requires_input(updater.new_agent_message([new_text_part(str(exc))]))
                return
            # the question timed out or was answered elsewhere: the text steers the run, or starts a turn
            if not answered and not live.conversation.steer(text) and not live.running:
                parked = None
        if parked is None:
            live, before = await asyncio.to_thread(_begin, profile, context.context_id)
            after = live.seq  # the turn's events are the ones after this
            refused = _start(profile, live, text)
            if refused:
                await updater.reject(updater.new_agent_message([new_text_part(refused)]))
                return
        await updater.start_work()
        async for seq, event in live.follow(after):
            if isinstance(event, Question) and not event.delegate_call:
                self._parked[context.task_id] = _Parked(live, seq, event, before)
                await progress.ask(event)
                return
            if isinstance(event, TurnEnd) and not event.delegate_call:
                session = live.conversation.id
                sandbox = profile.agent.sandboxes.peek(session)  # none: nothing written, no thread hop
                files = await asyncio.to_thread(written, sandbox, before) if sandbox else []
                await progress.files(files, session)
                await progress.end(event)
                return
            await progress.show(event)
            if seq == live.seq:  # caught up with the run: the text of this batch goes out now
                await progress.flush()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Interrupt the task's run and wait for it to stop; the SDK then marks the task canceled (or
        `execute` already has, from the run's interrupted end)."""
        profile: Profile = context.call_context.state["profile"]
        assert context.task_id is not None
        parked = self._parked.pop(context.task_id, None)
        live = parked.live if parked else profile.live.get(_known(profile, context.context_id or ""))
        if live is None or live.task is None:
            return
        live.conversation.interrupt()
        try:
            await asyncio.wait_for(asyncio.shield(live.task), STOP_WAIT)
        except TimeoutError:
            log.warning("session %s: the run outlived a cancel by %ss", live.conversation.id, STOP_WAIT)


def _known(profile: Profile, context_id: str) -> str:
    """The session bound to an A2A context ('' when none, or when it is gone). One this server holds
    live is there (as for the API's session routes): only another is looked up in the database."""
    found = profile.agent.bindings.get("a2a", context_id)
    session = found.session_id if found else None
    if session and (
        session in profile.live or profile.agent.store.get_session(session, profile.settings.profile)
    ):
        return session
    return ""


def _session(profile: Profile, context_id: str) -> LiveSession:
    """The live session of an A2A context: its bound one (resumed if need be), else a new one bound now."""
    session = _known(profile, context_id)
    if session:
        return profile.session(session)
    conversation = profile.agent.new_conversation(source="a2a")
    profile.agent.bindings.bind("a2a", context_id, conversation.id, keep=KEPT_CONTEXTS)
    return profile.open_session(conversation)


def _begin(profile: Profile, context_id: str) -> tuple[LiveSession, Listing]:
    """The context's live session and its workspace's files before the task (one thread hop for both)."""
    live = _session(profile, context_id)
    return live, listing(profile.agent.sandboxes.peek(live.conversation.id))


def _start(profile: Profile, live: LiveSession, text: str) -> str:
    """Start the turn as the API does; the reason it cannot start, else ''."""
    if live.running:
        return f"this context's session {live.conversation.id} is running another task; cancel it or wait"
    try:
        profile.start_turn(live, text)
    except HTTPException as exc:  # over the profile's limits: the API's 429
        return str(exc.detail)
    return ""
