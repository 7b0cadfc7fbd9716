"""How the CLI shows a run's events: the reply streams as it is written, tool calls as one line each
with their live output dimmed underneath, then a status line. A delegate call's children show as one
line per tool call under the call, indented by depth; the plan (todo) and questions as they come."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ..agent.display import describe_call
from ..events import (
    Answered,
    AssistantMessage,
    ChildEnd,
    ChildStart,
    Error,
    Event,
    Notice,
    Question,
    TextDelta,
    Todo,
    ToolEnd,
    ToolProgress,
    ToolStart,
    TurnEnd,
    Usage,
    UserMessage,
)

MARKS = {"pending": "[dim]○[/]", "in_progress": "[yellow]◐[/]", "done": "[green]●[/]"}


class EventPrinter:
    def __init__(self, console: Console, *, show_user: bool = False) -> None:
        self.console = console
        self.show_user = show_user
        self.streamed = False  # the current step's text already went out as deltas
        self.mid_line = False
        self.cost = 0.0
        self.tokens = 0
        self.children: dict[str, int] = {}  # a child's session -> its task number in the batch

    def _newline(self) -> None:
        if self.mid_line:
            self.console.print()
            self.mid_line = False

    def __call__(self, event: Event) -> None:
        if event.delegate_call:
            self._child_event(event)
            return
        self._own_event(event)

    def _child_event(self, event: Event) -> None:
        """A child's step, on one line under its delegate call; its streamed pieces are not shown
        (children run in parallel: their text would interleave)."""
        pad = "  " * event.depth + f"[magenta]{self.children.get(event.session_id, '?')}[/]"
        match event:
            case ToolStart(name=name, arguments=arguments):
                self._newline()
                self.console.print(f"{pad} [cyan]▸ {escape(describe_call(name, arguments))}[/]")
            case ToolEnd(ok=False, result=result):
                self.console.print(f"{pad}   [red]✗ {escape(_gist(result))}[/]")
            case ChildStart() | ChildEnd() | Question() | Answered() | Usage():
                self._own_event(event)
            case Notice(message=message) | Error(message=message):
                self.console.print(f"{pad} [yellow]{escape(message)}[/]")

    def _own_event(self, event: Event) -> None:
        pad = "  " * event.depth
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
            case ChildStart(child_id=child_id, index=index, goal=goal, sandbox=sandbox):
                self._newline()
                self.children[child_id] = index
                self.console.print(
                    f"{pad}  [magenta]{index}[/] [bold]child[/] ({sandbox} sandbox): {escape(_line(goal))}"
                )
            case ChildEnd(index=index, status=status, summary=summary, iterations=steps):
                colour = "green" if status == "done" else "red"
                self.console.print(
                    f"{pad}  [magenta]{index}[/] [{colour}]{status}[/] [dim]after {steps} step(s):[/] "
                    f"{escape(_line(summary))}"
                )
            case Todo(items=items):
                self._newline()
                done = sum(item.status == "done" for item in items)
                self.console.print(f"[bold]plan[/] [dim]{done}/{len(items)} done[/]")
                for item in items:
                    self.console.print(f"  {MARKS[item.status]} {escape(item.content)}")
            case Question(prompt=prompt, choices=choices):
                self._newline()
                listed = "  ".join(f"[{n}] {escape(choice)}" for n, choice in enumerate(choices, 1))
                self.console.print(f"[bold yellow]? {escape(prompt)}[/]" + (f"  {listed}" if listed else ""))
            case Answered(answer=answer, by=by):
                why = {"timeout": "none in time", "interrupt": "interrupted", "nobody": "no terminal"}
                said = escape(answer) if answer is not None else f"no answer ({why.get(by, by)})"
                self.console.print(f"  [dim]→ {said}[/]")
            case TurnEnd(reason=reason, iterations=iterations):
                self._newline()
                spent = f", ${self.cost:.4f}" if self.cost else ""
                self.console.print(
                    f"[dim]── {reason} after {iterations} step(s), {self.tokens:,} tokens{spent}[/]"
                )


def _line(text: str, width: int = 160) -> str:
    flat = " ".join(text.split())
    return flat[:width] + ("…" if len(flat) > width else "")


def _gist(result: str) -> str:
    """The line of a failed tool's result that says most: its last one that is not our status line."""
    lines = [line for line in result.splitlines() if line.strip() and not line.startswith("[exit code")]
    return lines[-1][:160] if lines else ""


def progress_bar(label: str, console: Console) -> Progress:
    """A many-items run's bar (batch, eval): done of total, how many failed (the task's `failed`
    field), time so far and the ETA."""
    return Progress(
        TextColumn(f"[bold]{label}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[red]{task.fields[failed]} failed[/]"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    )
