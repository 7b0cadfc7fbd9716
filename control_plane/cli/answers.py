"""Questions of a run answered at the terminal (`hermetic run`, `chat`): the answer is read as a line
from stdin while the run goes on; without a terminal, no one can answer and the run is told so at once."""

from __future__ import annotations

import asyncio
import sys

from rich.console import Console
from rich.markup import escape

from ..agent.loop import Conversation
from ..events import Answered, Event, Question


class TerminalAnswers:
    """Feed it the run's events; it answers each Question with the next line typed (a choice by its
    text or its number), oldest question first."""

    def __init__(self, conversation: Conversation, console: Console) -> None:
        self.conversation = conversation
        self.console = console
        self.interactive = sys.stdin.isatty()
        self.waiting: list[Question] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, Question):
            if not self.interactive:
                self.conversation.questions.decline(event.id)
                return
            self.waiting.append(event)
            if self._loop is None:  # events arrive on the run's event loop: read stdin there too
                self._loop = asyncio.get_running_loop()
                self._loop.add_reader(sys.stdin.fileno(), self._line)
            self.console.print("[bold yellow]answer ›[/] ", end="")
        elif isinstance(event, Answered):
            self.waiting = [question for question in self.waiting if question.id != event.id]
            if not self.waiting:
                self.close()

    def _line(self) -> None:
        line = sys.stdin.readline()
        if not line:  # end of input: nobody will answer
            for question in list(self.waiting):
                self.conversation.questions.decline(question.id)
            self.close()
            return
        if not self.waiting:
            return
        question, text = self.waiting[0], line.strip()
        if text.isdigit() and 1 <= int(text) <= len(question.choices):
            text = question.choices[int(text) - 1]
        try:
            self.conversation.answer(question.id, text)
        except ValueError as exc:
            self.console.print(f"[red]{escape(str(exc))}[/]\n[bold yellow]answer ›[/] ", end="")

    def close(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(sys.stdin.fileno())
            self._loop = None
