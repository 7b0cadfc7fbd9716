"""The gateway on Matrix: matrix-nio against a real Synapse started for the session
(tests/support/synapse_server.py), people on it as client-server API clients of their own, the scripted
model behind the agent."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import Running, gateway_settings, wait_answered
from ngircd import wait_for
from synapse_server import MatrixUser, Synapse, edits_of, final_texts, matrix_config, text_of

from control_plane.gateway import Gateway


@pytest.fixture
def alice(synapse: Synapse) -> Iterator[MatrixUser]:
    """The owner; she and the bot have accounts of this test's own (nothing of another test's reaches
    this one)."""
    user = MatrixUser(synapse, f"alice-{uuid.uuid4().hex[:8]}")
    yield user
    user.close()


@pytest.fixture
def bot(synapse: Synapse, alice: MatrixUser) -> str:
    return synapse.register(alice.user_id.split(":")[0].removeprefix("@").replace("alice", "bot"))


def _settings(tmp_path: Path, llm_url: str, server: Synapse, bot: str, alice: MatrixUser, **extra: Any) -> Any:
    config = matrix_config(server, bot, allow_users=[alice.user_id]) | extra
    return gateway_settings(tmp_path, llm_url, None, gateway={"matrix": config})


def _online(gateway: Gateway) -> None:
    wait_for(lambda: gateway.status["matrix"].state == "connected")


def _joined(alice: MatrixUser, room: str, bot: str) -> None:
    alice.hear(room, type="m.room.member", sender=bot)


def test_a_direct_chat_is_joined_and_its_reply_streams_as_edits_rendered_as_html(
    tmp_path: Path, fake_llm: Any, synapse: Synapse, bot: str, alice: MatrixUser
) -> None:
    words = " ".join(f"w{i}" for i in range(40))
    fake_llm.load(
        [{"text": f"# Result\n\nThis is **bold**: {words} done.", "pace": 0.02}, {"text": "second"}]
    )
    with Running(_settings(tmp_path, fake_llm.url, synapse, bot, alice)) as gateway:
        _online(gateway)
        room = alice.create_room([bot])
        _joined(alice, room, bot)
        alice.say(room, "first question")
        heard = alice.hear_reply(room, "done.")
        wait_answered(gateway, 1)
        alice.say(room, "and another")
        assert text_of(alice.hear_reply(room, "second")[0]) == "second"
        wait_answered(gateway, 2)
    first, edits = heard[0], heard[1:]
    assert first["sender"] == bot and edits, "the reply streamed by edits"
    assert {edits_of(e) for e in edits} == {first["event_id"]}, "each edit replaces the first (m.replace)"
    assert final_texts(heard) == {first["event_id"]: f"# Result\n\nThis is **bold**: {words} done."}
    html = final_texts(heard, "formatted_body")[first["event_id"]]
    assert html.startswith("<h1>Result</h1>") and "<strong>bold</strong>" in html
    assert edits[-1]["content"]["m.new_content"]["format"] == "org.matrix.custom.html"
    asked = [m["content"] for r in fake_llm.requests for m in r["messages"] if m["role"] == "user"]
    assert asked[0] == "first question" and asked[-1] == "and another"
