"""Questions a turn puts to the user: answered by id, no answer on timeout, ended by an interrupt."""

from __future__ import annotations

import threading

import pytest

from control_plane.agent.questions import Questions
from control_plane.events import Answered, Event, Question


def _ask_in_thread(questions: Questions, events: list[Event], **kw: object) -> tuple[threading.Thread, list]:
    got: list = []
    asked = threading.Event()

    def emit(event: Event) -> None:
        events.append(event)
        if isinstance(event, Question):
            asked.set()

    thread = threading.Thread(target=lambda: got.append(questions.ask(emit, **kw)))  # type: ignore[arg-type]
    thread.start()
    assert asked.wait(5)
    return thread, got


def test_an_answer_by_id_ends_the_wait_with_that_answer() -> None:
    questions, events = Questions(), []
    thread, got = _ask_in_thread(
        questions, events, kind="approval", prompt="allow pypi.org?", choices=["once", "always", "no"]
    )
    (question,) = questions.open()
    assert question.detail == {} and question.choices == ["once", "always", "no"]
    with pytest.raises(ValueError, match="once, always, no"):
        questions.answer(question.id, "sure")
    assert questions.answer(question.id, "once")
    thread.join(5)
    assert got == ["once"]
    assert isinstance(events[-1], Answered) and events[-1].by == "user" and events[-1].answer == "once"
    assert not questions.answer(question.id, "no"), "an answered question is closed"
    assert questions.open() == []


def test_no_answer_within_the_timeout_is_none() -> None:
    questions, events = Questions(), []
    thread, got = _ask_in_thread(questions, events, kind="clarify", prompt="which branch?", timeout=0.2)
    thread.join(5)
    assert got == [None]
    assert isinstance(events[-1], Answered) and events[-1].by == "timeout"


def test_an_interrupt_ends_every_open_question_with_no_answer() -> None:
    questions, events = Questions(), []
    thread, got = _ask_in_thread(questions, events, kind="clarify", prompt="which branch?", timeout=60)
    questions.cancel_all()
    thread.join(5)
    assert got == [None]
    assert isinstance(events[-1], Answered) and events[-1].by == "interrupt"


def test_a_second_answer_right_after_the_first_is_refused_and_the_first_stands() -> None:
    questions, events = Questions(), []
    thread, got = _ask_in_thread(
        questions, events, kind="approval", prompt="open 7000?", choices=["once", "no"]
    )
    (question,) = questions.open()
    # two presses of a chat's buttons, the second before the asking thread has woken up
    assert questions.answer(question.id, "once")
    assert not questions.answer(question.id, "no"), "the question closed with the first answer"
    assert not questions.decline(question.id)
    thread.join(5)
    assert got == ["once"] and isinstance(events[-1], Answered) and events[-1].by == "user"
