"""The Agent: what surfaces hold. It opens new conversations and resumes past ones."""

from __future__ import annotations

from typing import Any

from ..tools.todo import replay
from .base import AgentBase
from .loop import Conversation


class Agent(AgentBase):
    """An agent of one profile; its conversations share its parts (see AgentBase)."""

    def new_conversation(
        self,
        *,
        title: str | None = None,
        source: str = "cli",
        parent_id: str | None = None,
        system: str | None = None,
        toolsets: list[str] | None = None,
    ) -> Conversation:
        """A new session. A fork (a learning review) passes its own system prompt and toolsets."""
        return Conversation.open(
            self, title=title, source=source, parent_id=parent_id, system=system, toolsets=toolsets
        )

    def resume(self, session_id: str) -> Conversation:
        """A past session of this profile, its history repaired if a run died mid-batch. Raises KeyError."""
        if self.store.get_session(session_id, self.settings.profile) is None:
            raise KeyError(session_id)
        conversation = Conversation(self, session_id, _repair(self.store.history(session_id)))
        conversation.rebuild_system = self.system_prompt
        calls = self.store.tool_calls(session_id)
        conversation.todo[:] = replay((call.tool, call.arguments, call.ok) for call in calls)
        return conversation

    def fork_session(self, session_id: str) -> Conversation:
        """A new session with a copy of this one's history and of its sandbox: a fork of the running
        one, else its latest checkpoint (control_plane/checkpoints.py). Raises KeyError, SandboxLimit."""
        record = self.store.get_session(session_id, self.settings.profile)
        if record is None:
            raise KeyError(session_id)
        if self.sandboxes.peek(session_id) is not None:  # its copy is one more: refused before the record
            self.sandboxes.admit()
        history = _repair(self.store.history(session_id))
        fork = self.store.create_session(
            self.settings.profile,
            title=f"fork of {record.title or session_id}",
            model=self.settings.model.name,
            source="fork",
            parent_id=session_id,
        )
        self.store.add_messages(fork.id, history)
        conversation = Conversation(self, fork.id, history)
        conversation.rebuild_system = self.system_prompt
        conversation.notices.append(
            f"forked from session {session_id}: sandbox {self.checkpoints.fork_sandbox(session_id, fork.id)}"
        )
        return conversation


def _repair(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give every tool call a result, so a run that died mid-batch can be resumed."""
    repaired: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for message in history:
        if pending and message.get("role") != "tool":
            repaired += [_lost(call) for call in pending]
            pending = []
        if message.get("role") == "tool":
            pending = [call for call in pending if call["id"] != message.get("tool_call_id")]
        repaired.append(message)
        if message.get("role") == "assistant" and message.get("tool_calls"):
            pending = list(message["tool_calls"])
    return repaired + [_lost(call) for call in pending]


def _lost(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": call["id"],
        "name": call["function"]["name"],
        "content": "[no result: the run ended before this call finished]",
    }
