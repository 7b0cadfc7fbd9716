"""The run's questions asked at the terminal: `hermetic run` and `chat` wrap their event printer in this."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.markup import escape

from ..agent.events import Answered, Event, Question
from ..agent.loop import Conversation


class PromptingEmit:
    """Passes every event on, then asks each Question at the prompt (stderr) and answers it.

    The prompt blocks the event loop on purpose: the turn waits for the answer anyway, and nothing else
    may read the terminal meanwhile. End of input answers no (a piped `hermetic run` never hangs)."""

    def __init__(self, emit: Callable[[Event], None], conversation: Conversation, console: Console) -> None:
        self.emit = emit
        self.conversation = conversation
        self.console = console

    def __call__(self, event: Event) -> None:
        self.emit(event)
        if isinstance(event, Question):
            self._ask(event)
        elif isinstance(event, Answered) and event.by == "timeout":
            self.console.print("[yellow]no answer in time: taken as no[/]")

    def _ask(self, question: Question) -> None:
        choices = question.choices
        hint = escape(" [" + "/".join(choices) + "]") if choices else ""
        while True:
            try:
                text = self.console.input(f"[bold yellow]? {escape(question.prompt)}{hint}[/] ").strip()
            except EOFError:
                text = "no" if "no" in choices or not choices else choices[-1]
            try:
                if not self.conversation.answer(question.id, text):
                    self.console.print("[yellow]too late: the question was already closed[/]")
                return
            except ValueError as exc:
                self.console.print(f"[red]{escape(str(exc))}[/]")
