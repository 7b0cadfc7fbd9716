"""The chat commands (control_plane/agent/commands.py): one implementation, used by `hermetic chat`
and the gateway; here through the CLI as a user types them, and /model switching one session."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from conftest import get_backend
from hermetic_cli import hermetic, scripted_env

from control_plane.agent.agent import Agent
from control_plane.agent.commands import is_command, run_command
from control_plane.config.settings import load_settings


def test_hermetic_chat_opens_with_a_status_line_and_answers_commands_itself(
    tmp_path: Path, fake_llm: Any
) -> None:
    get_backend("local")
    fake_llm.load([{"text": "hi back"}])
    env = scripted_env(tmp_path, fake_llm.url)
    done = hermetic("chat", env=env, stdin="/help\n/status\nhello\n/new\n/exit\n")
    assert done.returncode == 0, done.stderr
    assert "model openai/scripted · backend local · memory MEMORY.md 0%" in done.stderr
    assert "/stop  interrupt the running reply" in done.stdout
    assert "session s-" in done.stdout and "(idle)" in done.stdout
    assert "hi back" in done.stdout and "New session s-" in done.stdout
    assert len(fake_llm.requests) == 1, "only `hello` went to the model"
    assert fake_llm.requests[0]["messages"][-1] == {"role": "user", "content": "hello"}


def test_model_switches_this_session_among_the_configured_models(tmp_path: Path, fake_llm: Any) -> None:
    model = {
        "name": "openai/scripted",
        "api_base": fake_llm.url,
        "api_key": "test",
        "retries": 0,
        "fallbacks": [{"name": "openai/other", "api_base": fake_llm.url, "api_key": "test"}],
    }
    agent = Agent(load_settings(root=tmp_path, model=model, backend="local", learning={"enabled": False}))
    try:
        conversation = agent.new_conversation(source="chat")
        listing = run_command(agent, conversation, "/model", source="chat")
        assert listing is not None and listing.text.splitlines() == ["• openai/scripted", "  openai/other"]
        refused = run_command(agent, conversation, "/model openai/nope", source="chat")
        assert refused is not None and "No model 'openai/nope'" in refused.text
        switched = run_command(agent, conversation, "/model openai/other", source="chat")
        assert switched is not None and "now uses openai/other" in switched.text
        fake_llm.load([{"text": "from the other model"}])
        end = asyncio.run(conversation.run("hi", lambda event: None))
        assert end.content == "from the other model"
        assert fake_llm.requests[0]["model"] == "other"
        assert agent.store.get_session(conversation.id, "default").model == "openai/other"
        other = agent.new_conversation(source="chat")
        assert other.router.settings.name == "openai/scripted", "the switch is this session's only"
    finally:
        agent.close()


def test_what_counts_as_a_command() -> None:
    assert is_command("/help") and is_command("/status@hermetic_bot") and is_command("/model openai/x")
    assert not is_command("/etc/passwd is a file") and not is_command("hello /help") and not is_command("")
