"""The gateway on Telegram: python-telegram-bot against the Bot API stand-in (tests/telegram_standin.py),
the scripted model behind the agent, real sandboxes and the real sessions database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import OWNER, Running, gateway_settings, wait_answered
from telegram_standin import TelegramStandin

from control_plane.gateway.records import GatewayStore


@pytest.fixture
def standin() -> Iterator[TelegramStandin]:
    server = TelegramStandin()
    yield server
    server.close()


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def final_text(standin: TelegramStandin, chat: int, contains: str, timeout: float = 30) -> str:
    """The text of the bot's message in `chat` that contains `contains`, once it does."""

    def found() -> str | None:
        return next((m.text for m in standin.bot_messages(chat) if contains in m.text), None)

    return standin.wait_for(found, timeout)


def test_a_message_is_answered_in_a_session_streamed_by_editing_one_message(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    reply = "Hello there, " + " ".join(f"word{i}" for i in range(60)) + " done."
    fake_llm.load([{"text": reply, "pace": 0.01}])
    settings = gateway_settings(tmp_path, fake_llm.url, standin)
    with Running(settings) as gateway:
        standin.user_says(OWNER, "hi, who are you?")
        wait_answered(gateway, 1)
        (message,) = standin.bot_messages(OWNER)
        assert message.text == reply
        sends = standin.called("sendMessage")
        assert len(sends) == 1, "the reply is one message, edited in place"
        assert standin.called("editMessageText"), "the reply streamed by edits"
        store = gateway.agent.store
        (session,) = [s for s in store.list_sessions("default") if s.source == "telegram"]
        history = store.history(session.id)
        assert [m["role"] for m in history] == ["system", "user", "assistant"]
        assert history[1]["content"] == "hi, who are you?"
        offset = GatewayStore(str(settings.database_url)).get_state(
            f"{gateway.adapters['telegram'].lock_name}:offset"
        )
        assert offset is not None and int(offset) > 0, "the getUpdates offset is persisted"


def test_a_second_message_continues_the_same_session_and_new_starts_another(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    fake_llm.load([{"text": "first answer"}, {"text": "second answer"}, {"text": "third answer"}])
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.user_says(OWNER, "one")
        final_text(standin, OWNER, "first answer")
        standin.user_says(OWNER, "two")
        final_text(standin, OWNER, "second answer")
        standin.user_says(OWNER, "/new")
        final_text(standin, OWNER, "New session")
        standin.user_says(OWNER, "three")
        final_text(standin, OWNER, "third answer")
        sessions = [s for s in gateway.agent.store.list_sessions("default") if s.source == "telegram"]
        assert len(sessions) == 2
        users = sorted(
            [m["content"] for m in gateway.agent.store.history(s.id) if m["role"] == "user"] for s in sessions
        )
        assert users == [["one", "two"], ["three"]]
        assert len(fake_llm.requests) == 3, "/new went to no model"
