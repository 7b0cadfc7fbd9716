"""A turn's budget: the model calls and the tool calls it may make (a script's inner calls count like the
model's own). A child agent's budget draws on its parent's, so a batch of children together never
spends more than the parent has left."""

from __future__ import annotations

import threading


class Budget:
    def __init__(self, limit: int, parent: Budget | None = None, tool_limit: int = 1000) -> None:
        self.limit = limit
        self.parent = parent
        self.used = 0
        self.tool_limit = tool_limit
        self.tools_used = 0
        self._lock = threading.Lock()

    @property
    def left(self) -> int:
        mine = self.limit - self.used
        return mine if self.parent is None else min(mine, self.parent.left)

    def take(self) -> bool:
        """Spend one model call, here and in every ancestor; False (nothing spent) when any is spent out."""
        with self._lock:
            if self.used >= self.limit or (self.parent is not None and not self.parent.take()):
                return False
            self.used += 1
            return True

    def take_tool_call(self) -> bool:
        """Spend one tool call, here and in every ancestor; False (nothing spent) when any is spent out."""
        with self._lock:
            if self.tools_used >= self.tool_limit or (
                self.parent is not None and not self.parent.take_tool_call()
            ):
                return False
            self.tools_used += 1
            return True
