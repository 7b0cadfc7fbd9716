"""How the CLI shows a run's events: the reply streams as it is written, tool calls as one line each
with their live output dimmed underneath, then a status line."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from ..agent.display import describe_call
from ..agent.events import (
    AssistantMessage,
    Error,
    Event,
    Notice,
    TextDelta,
    ToolEnd,
    ToolProgress,
    ToolStart,
    TurnEnd,
    Usage,
    UserMessage,
)


class EventPrinter:
    def __init__(self, console: Console, *, show_user: bool = False) -> None:
        self.console = console
        self.show_user = show_user
        self.streamed = False  # the current step's text already went out as deltas
        self.mid_line = False
        self.cost = 0.0
        self.tokens = 0

    def _newline(self) -> None:
        if self.mid_line:
            self.console.print()
            self.mid_line = False

    def __call__(self, event: Event) -> None:
        match event:
            case TextDelta(text=text):
                self.console.print(text, end="", markup=False, highlight=False)
                self.streamed = True
                self.mid_line = not text.endswith("\n")
            case AssistantMessage(content=content):
                if content and not self.streamed:
                    self.console.print(content, markup=False, highlight=False)
                elif self.streamed:
                    self._newline()
                self.streamed = False
            case ToolStart(name=name, arguments=arguments):
                self._newline()
                self.console.print(f"[cyan]▸ {escape(describe_call(name, arguments))}[/]")
            case ToolProgress(text=text):
                self.console.print(f"[dim]{escape(text)}[/]", end="")
                self.mid_line = not text.endswith("\n")
            case ToolEnd(ok=ok, duration_ms=ms, exit_code=code, result=result):
                self._newline()
                mark = "[green]✓[/]" if ok else "[red]✗[/]"
                detail = f" exit {code}" if code not in (None, 0) else ""
                gist = "" if ok else f" [red]{escape(_gist(result))}[/]"
                self.console.print(f"  {mark} [dim]{ms:,.0f} ms{detail}[/]{gist}")
            case Usage(prompt_tokens=pt, completion_tokens=ct, cost=cost):
                self.tokens += pt + ct
                self.cost += cost or 0.0
            case Notice(message=message):
                self._newline()
                self.console.print(f"[yellow]notice: {escape(message)}[/]")
            case Error(message=message):
                self._newline()
                self.console.print(f"[red]error: {escape(message)}[/]")
            case UserMessage(content=content, steer=steer):
                if self.show_user or steer:
                    self._newline()
                    self.console.print(f"[bold]{'steer' if steer else 'you'}:[/] {escape(content)}")
            case TurnEnd(reason=reason, iterations=iterations):
                self._newline()
                spent = f", ${self.cost:.4f}" if self.cost else ""
                self.console.print(
                    f"[dim]── {reason} after {iterations} step(s), {self.tokens:,} tokens{spent}[/]"
                )


def _gist(result: str) -> str:
    """The line of a failed tool's result that says most: its last one that is not our status line."""
    lines = [line for line in result.splitlines() if line.strip() and not line.startswith("[exit code")]
    return lines[-1][:160] if lines else ""
