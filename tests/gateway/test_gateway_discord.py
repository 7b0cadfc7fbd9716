"""The gateway on Discord: discord.py against the stand-in of its REST API and gateway WebSocket
(tests/standins/discord_standin.py), the scripted model behind the agent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from discord_standin import TOKEN, DiscordStandin
from gateway_harness import Running, gateway_settings, wait_answered


@pytest.fixture
def discord_api() -> Iterator[DiscordStandin]:
    server = DiscordStandin()
    yield server
    server.close()


def _settings(tmp_path: Path, llm_url: str, api: DiscordStandin, **extra: Any) -> Any:
    config = {"token": TOKEN, "api_base": api.api_base, "allow_users": ["501"], "edit_interval": 0.05} | extra
    return gateway_settings(tmp_path, llm_url, None, gateway={"discord": config})


def test_a_direct_message_is_answered_by_editing_one_message_split_at_2000(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    reply = " ".join(f"word{i}" for i in range(500))  # about 3,400 characters: two messages
    fake_llm.load([{"text": reply, "pace": 0.001}])
    with Running(_settings(tmp_path, fake_llm.url, discord_api)) as gateway:
        discord_api.limit_edits(1)
        discord_api.user_says("777", "hello from discord")
        wait_answered(gateway, 1)
        parts = discord_api.contents("777")
        assert len(parts) == 2 and all(len(p) <= 2000 for p in parts)
        assert " ".join(parts).split() == reply.split()
        edits = discord_api.called("PATCH", "/channels/777/messages/")
        assert len(edits) >= 2, "the reply streamed by edits; discord.py waited out the 429 and sent it again"
        (session,) = [s for s in gateway.agent.store.list_sessions("default") if s.source == "discord"]
        assert gateway.agent.store.history(session.id)[1]["content"] == "hello from discord"


def test_after_the_gateway_socket_drops_discord_py_comes_back_and_answers(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    fake_llm.load([{"text": "first"}, {"text": "second"}])
    with Running(_settings(tmp_path, fake_llm.url, discord_api)) as gateway:
        discord_api.user_says("777", "one")
        wait_answered(gateway, 1)
        discord_api.drop_connections()
        discord_api.user_says("777", "two")  # waits for the new connection to be ready
        wait_answered(gateway, 2)
        assert discord_api.contents("777") == ["first", "second"]
        assert discord_api.called("WS", "op6") or len(discord_api.called("WS", "op2")) == 2


def test_a_guild_channel_message_is_refused_unless_the_channel_is_allowed(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    fake_llm.load([{"text": "hello channel"}])
    with Running(_settings(tmp_path, fake_llm.url, discord_api, allow_chats=["888"])) as gateway:
        discord_api.user_says("999", "anyone?", guild="1")
        discord_api.user_says("888", "anyone here?", guild="1")
        wait_answered(gateway, 1)
        assert discord_api.contents("999") == [] and discord_api.contents("888") == ["hello channel"]


def test_an_approval_shown_with_buttons_is_answered_by_replying_with_a_choice_and_a_file_is_sent(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    from gateway_harness import asking_registry

    fake_llm.load(
        [
            {"tool_calls": [{"name": "open_port", "arguments": {"port": 7000}}]},
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "notes.md", "content": "# notes\n"}}
                ]
            },
            {"tool_calls": [{"name": "send_file", "arguments": {"path": "notes.md"}}]},
            {"text": "Opened, and sent the notes."},
        ]
    )
    settings = _settings(tmp_path, fake_llm.url, discord_api).model_copy(
        update={"toolsets": ["files", "test", "gateway"]}
    )
    with Running(settings, asking_registry(timeout=300)) as gateway:
        discord_api.user_says("777", "open 7000 and send me notes")
        asked = discord_api.wait_for(
            lambda: [c for c in discord_api.contents("777") if "Expose port 7000?" in c]
        )
        assert "(press one, or reply with your answer (once, always, no))" in asked[0]
        discord_api.user_says("777", "maybe")  # not a choice: asked again, the run keeps waiting
        discord_api.wait_for(
            lambda: any("answer one of: once, always, no" in c for c in discord_api.contents("777"))
        )
        discord_api.user_says("777", "once")
        wait_answered(gateway, 3)
        assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: once"
        (prompt,) = [m for m in discord_api.history["777"] if m["content"].startswith("Expose port 7000?")]
        assert prompt["content"].endswith("→ once") and prompt["components"] == [], "its buttons removed"
        (sent,) = [m for m in discord_api.messages.values() if m["file"] is not None]
        assert sent["file"] == b"# notes\n"


def test_messages_sent_while_the_gateway_was_down_are_backfilled_within_the_age_and_count_bounds(
    tmp_path: Path, fake_llm: Any, discord_api: DiscordStandin
) -> None:
    import datetime

    fake_llm.load([{"text": "hello back"}, {"text": "caught up"}, {"text": "and that too"}])
    settings = _settings(tmp_path, fake_llm.url, discord_api, backfill_hours=1, backfill_limit=2)
    now = datetime.datetime.now(datetime.UTC)
    with Running(settings) as gateway:
        discord_api.user_says("777", "hello", at=now - datetime.timedelta(hours=3))
        wait_answered(gateway, 1)
    # while no gateway runs: one message older than backfill_hours, three newer (the limit keeps two)
    discord_api.user_says("777", "too old to answer", live=False, at=now - datetime.timedelta(hours=2))
    for text in ("one", "two", "three"):
        discord_api.user_says("777", text, live=False)
    discord_api.user_says("778", "in a channel never seen", live=False)
    before = len(discord_api.calls)  # the first run may have read 777 too, had "hello" beaten its READY
    with Running(settings) as gateway:
        wait_answered(gateway, 3)
        reads = [
            path for verb, path, _ in discord_api.calls[before:] if verb == "GET" and "/messages" in path
        ]
        assert reads == ["/channels/777/messages"], "only the channel the store knows is read, in one page"
    seen = [m["content"] for r in fake_llm.requests for m in r["messages"] if m["role"] == "user"]
    assert "two" in seen and "three" in seen, "the newest two were answered (one on its own or steered)"
    assert not {"one", "too old to answer", "in a channel never seen", "hello back"} & set(seen)
