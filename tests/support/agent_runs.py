"""The agent loop driven as the tests drive it: settings for a scripted model, one turn, a tool call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from conftest import get_backend

from control_plane.agent.loop import Conversation
from control_plane.config.settings import Settings, load_settings
from control_plane.events import Event, TurnEnd


def settings_for(root: Path, url: str, backend: str = "docker", **overrides: Any) -> Settings:
    get_backend(backend)  # skips, with the reason, when this backend cannot run here
    model = {"name": "openai/scripted", "api_base": url, "api_key": "test-key-123456", "retries": 0}
    model.update(overrides.pop("model", {}))
    overrides.setdefault("learning", {"enabled": False})  # reviews are tested in test_learning.py
    return load_settings(root=root, model=model, backend=backend, **overrides)


def call(name: str, /, **arguments: Any) -> dict[str, Any]:
    """A tool call as the scripted model sends it (`name` positional only: a tool may take a `name`)."""
    return {"name": name, "arguments": arguments}


def run(conversation: Conversation, text: str) -> tuple[TurnEnd, list[Event]]:
    events: list[Event] = []
    end = asyncio.run(conversation.run(text, events.append))
    return end, events


def tool_messages(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]
