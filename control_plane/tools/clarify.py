"""clarify: ask the user a question and wait for the answer (agent/questions.py carries it)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from .registry import ToolContext, ToolResult, tool


class ClarifyArgs(BaseModel):
    question: str = Field(min_length=1, max_length=2000, description="One clear question for the user.")
    choices: list[str] = Field(
        [],
        max_length=6,
        description="Up to 6 short answers the user picks from; empty for a free-text answer.",
    )


@tool("clarify", toolset="clarify")
def clarify(ctx: ToolContext, args: ClarifyArgs) -> ToolResult:
    """Ask the user a question and wait for the answer, when you cannot go on well without it (an
    ambiguous request, a choice only the user can make). Not for things you can find out yourself. When
    no answer comes (nobody at the terminal, the wait ran out) you are told so: then go on with your best
    judgement and say what you assumed."""
    choices = list(dict.fromkeys(choice.strip() for choice in args.choices if choice.strip()))
    answer = ctx.ask(kind="clarify", prompt=args.question, choices=choices)
    if answer is None:
        return ToolResult("no answer from the user: go on with your best judgement and say what you assumed")
    return ToolResult(f"the user answered: {answer}")
