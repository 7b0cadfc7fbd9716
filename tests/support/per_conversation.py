"""A scripted model that answers each conversation by its own prompt (batch runs)."""

from __future__ import annotations

from typing import Any

from control_plane.models.fake_llm import FakeLLM, ScriptedToolCall, Turn


class PerConversation(FakeLLM):
    """Each conversation: first a terminal call echoing its prompt, then an answer quoting the result."""

    def __init__(self, delay: float = 0.0, tool_first: bool = True) -> None:
        super().__init__()
        self.delay = delay
        self.tool_first = tool_first

    def _next(self, body: dict[str, Any]) -> tuple[int, Turn | None]:
        with self._lock:
            self.requests.append(body)
            number = len(self.requests)
        last = body["messages"][-1]
        if last["role"] == "user" and self.tool_first:
            command = f"echo ran {last['content'].split()[-1]}"
            return number, Turn(
                tool_calls=[ScriptedToolCall(name="terminal", arguments={"command": command})],
                delay=self.delay,
            )
        return number, Turn(text=f"answer: {(last.get('content') or '').strip()[-40:]}", delay=self.delay)
