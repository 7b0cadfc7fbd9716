"""Quality filters for training data: each on by default, each dropped trajectory counted under the first
reason it fails."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .reader import Trajectory

REASONS = {
    "budget": "hit the iteration budget",
    "incomplete": "did not complete (no final answer)",
    "empty_final": "empty final answer",
    "unknown_tool": "called a tool that does not exist",
    "unclosed": "unclosed <think> tag or code fence",
    "few_tool_calls": "fewer tool calls than --min-tool-calls",
    "failed_tools": "a tool call failed (--only-success)",
}
DEFAULT_CHECKS = frozenset({"budget", "incomplete", "empty_final", "unknown_tool", "unclosed"})


@dataclass
class Quality:
    known_tools: set[str]
    max_iterations: int
    """A last turn with this many model steps and no final answer hit the budget."""
    checks: set[str] = field(default_factory=lambda: set(DEFAULT_CHECKS))
    min_tool_calls: int = 0
    only_success: bool = False
    dropped: Counter[str] = field(default_factory=Counter)
    kept: int = 0

    def keep(self, trajectory: Trajectory) -> bool:
        """Whether the trajectory passes; when not, its first failing reason is counted."""
        reason = self.reason(trajectory.messages, trajectory.failed_calls)
        if reason is None:
            self.kept += 1
            return True
        self.dropped[reason] += 1
        return False

    def reason(self, messages: list[dict[str, Any]], failed_calls: int = 0) -> str | None:
        final = messages[-1] if messages else {}
        complete = final.get("role") == "assistant" and not final.get("tool_calls")
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        last_turn = messages[users[-1] + 1 :] if users else []
        steps = sum(1 for m in last_turn if m["role"] == "assistant")
        assistant = [m for m in messages if m["role"] == "assistant"]
        calls = [c for m in assistant for c in m.get("tool_calls") or []]
        found = {
            "budget": not complete and steps >= self.max_iterations,
            "incomplete": not complete or not users,
            "empty_final": complete and not (final.get("content") or "").strip(),
            "unknown_tool": any(c.get("function", {}).get("name") not in self.known_tools for c in calls),
            "unclosed": any(_unclosed(m.get("content") or "") for m in assistant),
            "few_tool_calls": len(calls) < self.min_tool_calls,
            "failed_tools": self.only_success and failed_calls > 0,
        }
        active = self.checks | ({"few_tool_calls"} if self.min_tool_calls else set())
        active |= {"failed_tools"} if self.only_success else set()
        return next((name for name in REASONS if name in active and found[name]), None)

    def report(self) -> dict[str, int]:
        return {"kept": self.kept, **{name: self.dropped[name] for name in REASONS if self.dropped[name]}}


def _unclosed(text: str) -> bool:
    return text.count("<think>") != text.count("</think>") or text.count("```") % 2 == 1
