"""A turn nobody watches (a batch item, an evaluation attempt): run to its end or a timeout, with what
it used counted from its events as they pass (tool calls, tokens, cost, reported errors)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..events import Event, TurnEnd

if TYPE_CHECKING:
    from .loop import Conversation


@dataclass
class Tally:
    """An event callback (or a tap on one) that keeps the counts unattended runs record per item."""

    tool_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    """US dollars, as far as litellm knows the model's price."""
    errors: list[str] = field(default_factory=list)

    def __call__(self, event: Event) -> None:
        if event.type == "tool_end":
            self.tool_calls += 1
        elif event.type == "usage":
            self.prompt_tokens += event.prompt_tokens
            self.completion_tokens += event.completion_tokens
            self.cost += event.cost or 0.0
        elif event.type == "error":
            self.errors.append(event.message)


async def run_until(
    conversation: Conversation, text: str, tally: Tally, timeout: float
) -> tuple[TurnEnd, bool]:
    """The turn's end, and whether it ran past `timeout` seconds (then it was interrupted)."""
    turn = asyncio.create_task(conversation.run(text, tally))
    done, _ = await asyncio.wait({turn}, timeout=timeout)
    if not done:
        conversation.interrupt()
    return await turn, not done
