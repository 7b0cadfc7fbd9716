"""Questions a running turn puts to the user: approvals (a host for the allowlist, an exposed port)
and clarifications. A tool asks from its worker thread and waits; any surface answers by id.

The question goes out as a `Question` event; `Conversation.answer(id, text)` (or an interrupt) ends
the wait; no answer within the timeout is `None`, which every caller treats as "no".
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ..events import Answered, Event, Question, QuestionKind


@dataclass
class _Pending:
    question: Question
    done: threading.Event = field(default_factory=threading.Event)
    answer: str | None = None
    answered: bool = False
    ended_by: Literal["interrupt", "nobody"] = "interrupt"


class Questions:
    """The open questions of one conversation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, _Pending] = {}

    def ask(
        self,
        emit: Callable[[Event], None],
        *,
        kind: QuestionKind,
        prompt: str,
        choices: list[str] | None = None,
        timeout: float = 120.0,
        detail: dict[str, str] | None = None,
    ) -> str | None:
        """Emit the question and block until it is answered; None on timeout or interrupt (`cancel_all`)."""
        question = Question(
            id=uuid.uuid4().hex[:12],
            kind=kind,
            prompt=prompt,
            choices=list(choices or []),
            timeout_s=timeout,
            detail=dict(detail or {}),
        )
        pending = _Pending(question)
        with self._lock:
            self._open[question.id] = pending
        emit(question)
        try:
            finished = pending.done.wait(timeout)
        finally:
            with self._lock:
                self._open.pop(question.id, None)
        by = "user" if pending.answered else pending.ended_by if finished else "timeout"
        emit(Answered(id=question.id, answer=pending.answer, by=by))
        return pending.answer

    def answer(self, question_id: str, answer: str) -> bool:
        """Answer an open question; False when there is none with that id (answered, timed out)."""
        with self._lock:
            pending = self._open.get(question_id)
            if pending is None or pending.done.is_set():  # ended, its waiter not yet awake: closed too
                return False
            question = pending.question
            if question.choices and answer not in question.choices:
                raise ValueError(f"answer one of: {', '.join(question.choices)}")
            pending.answer, pending.answered = answer, True
        pending.done.set()
        return True

    def decline(self, question_id: str) -> bool:
        """End the wait with no answer because no one can give one here (`hermetic run` without a
        terminal); False when the question is not open."""
        with self._lock:
            pending = self._open.get(question_id)
            if pending is None or pending.done.is_set():
                return False
            pending.ended_by = "nobody"
        pending.done.set()
        return True

    def open(self) -> list[Question]:
        with self._lock:
            return [pending.question for pending in self._open.values()]

    def cancel_all(self) -> None:
        """End every wait with no answer (an interrupt, or the conversation is closing)."""
        with self._lock:
            waiting = list(self._open.values())
        for pending in waiting:
            pending.done.set()
