"""The gateway on Matrix: matrix-nio against a real Synapse started for the session
(tests/support/synapse_server.py), people on it as client-server API clients of their own, the scripted
model behind the agent."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import APPROVE_THEN_SEND_FILE, Running, asking_registry, gateway_settings, wait_answered
from ngircd import wait_for
from synapse_server import MatrixUser, Synapse, edits_of, final_texts, matrix_config, text_of

from control_plane.gateway import Gateway
from control_plane.gateway.base import AdapterError


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


def _settings(
    tmp_path: Path, llm_url: str, server: Synapse, bot: str, alice: MatrixUser, **extra: Any
) -> Any:
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
        assert list(final_texts(alice.hear_reply(room, "second")).values()) == ["second"]
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


def test_a_message_sent_while_the_gateway_was_down_is_answered_and_a_replayed_sync_is_not(
    tmp_path: Path, fake_llm: Any, synapse: Synapse, bot: str, alice: MatrixUser
) -> None:
    fake_llm.load([{"text": "one answered"}, {"text": "kept for me"}])
    settings = _settings(tmp_path, fake_llm.url, synapse, bot, alice)
    with Running(settings) as gateway:
        _online(gateway)
        room = alice.create_room([bot])
        _joined(alice, room, bot)
        key = gateway.adapters["matrix"]._batch_key  # type: ignore[attr-defined]
        wait_for(lambda: gateway.store.get_state(key))
        before = gateway.store.get_state(key)  # a sync token from before the first message
        alice.say(room, "question one")
        alice.hear_reply(room, "one answered")
        wait_answered(gateway, 1)
        # a crash between delivering a sync and storing its token: that sync comes again
        gateway.store.set_state(key, before)
    alice.say(room, "while you were out")  # no gateway runs
    with Running(settings) as gateway:
        assert list(final_texts(alice.hear_reply(room, "kept for me")).values()) == ["kept for me"]
        wait_answered(gateway, 2)
    assert len(fake_llm.requests) == 2, "question one was recognised by its event id, not answered again"
    assert fake_llm.requests[1]["messages"][-1]["content"] == "while you were out"


def test_a_429_from_the_homeserver_is_waited_out_and_the_reply_completes(
    tmp_path: Path, fake_llm: Any, synapse: Synapse, bot: str, alice: MatrixUser, caplog: Any
) -> None:
    words = " ".join(f"w{i}" for i in range(60))
    fake_llm.load([{"text": f"{words} done.", "pace": 0.02}])
    synapse.rate_limit(bot, per_second=2, burst=1)  # edits every 0.05 s are far more than that
    settings = _settings(tmp_path, fake_llm.url, synapse, bot, alice)
    with caplog.at_level(logging.INFO, "hermetic.gateway"), Running(settings) as gateway:
        room = alice.create_room([bot])
        alice.say(room, "a question")
        heard = alice.hear_reply(room, "done.")
        wait_answered(gateway, 1)
    assert list(final_texts(heard).values()) == [f"{words} done."]
    assert any("rate limited: waiting" in r.getMessage() for r in caplog.records), "Synapse said 429"


def test_a_stranger_is_given_a_pairing_code_and_their_group_invite_is_rejected(
    tmp_path: Path, fake_llm: Any, synapse: Synapse, bot: str, alice: MatrixUser
) -> None:
    fake_llm.load([])
    mallory = MatrixUser(synapse, alice.user_id.split(":")[0][1:].replace("alice", "mallory"))
    try:
        with Running(_settings(tmp_path, fake_llm.url, synapse, bot, alice)) as gateway:
            _online(gateway)
            direct = mallory.create_room([bot])
            _joined(mallory, direct, bot)  # a direct chat: joined, so that pairing can begin
            mallory.say(direct, "let me in")
            told = text_of(mallory.hear(direct, type="m.room.message"))
            assert "hermetic gateway pair " in told and "The code works once" in told
            group = mallory.create_room([bot], direct=False, name="mallory's")
            left = mallory.hear(group, type="m.room.member", sender=bot)
            assert left["content"]["membership"] == "leave", "a stranger's group invite is rejected"
            room = alice.create_room([bot])
            _joined(alice, room, bot)
            alice.say(room, "/help")
            assert "/new" in text_of(alice.hear(room, type="m.room.message"))
    finally:
        mallory.close()
    assert fake_llm.requests == []


def test_in_an_allowed_room_only_mentions_are_answered_and_a_thread_is_answered_in_the_thread(
    tmp_path: Path, fake_llm: Any, synapse: Synapse, bot: str, alice: MatrixUser
) -> None:
    fake_llm.load([{"text": "bob is"}, {"text": "in the thread"}])
    carol = synapse.register(alice.user_id.split(":")[0][1:].replace("alice", "carol"))
    room = alice.create_room([bot, carol], direct=False, name="ops")
    name = bot.split(":")[0][1:]
    with Running(_settings(tmp_path, fake_llm.url, synapse, bot, alice, allow_chats=[room])) as gateway:
        _online(gateway)
        _joined(alice, room, bot)
        alice.say(room, "people talking among themselves")
        alice.send(room, {"msgtype": "m.notice", "body": f"{name}: a bot's notice, never answered"})
        alice.say(room, f"{name}: who is on call?")
        top = alice.hear_reply(room, "bob is")
        wait_answered(gateway, 1)
        root = alice.say(room, "a thread about the outage")
        thread = {"rel_type": "m.thread", "event_id": root, "is_falling_back": True,
                  "m.in_reply_to": {"event_id": root}}  # fmt: skip
        alice.say(room, f"what happened, {bot}?", **{"m.relates_to": thread})
        threaded = alice.hear_reply(room, "in the thread")
        wait_answered(gateway, 2)
    assert "m.relates_to" not in top[0]["content"]
    assert threaded[0]["content"]["m.relates_to"]["rel_type"] == "m.thread"
    assert threaded[0]["content"]["m.relates_to"]["event_id"] == root, "the reply is in the thread"
    asked = [r["messages"][-1]["content"] for r in fake_llm.requests]
    assert asked == ["who is on call?", "what happened, ?"]


def test_an_approval_is_answered_by_a_reaction_and_files_go_both_ways(
    tmp_path: Path, fake_llm: Any, synapse: Synapse, bot: str, alice: MatrixUser
) -> None:
    read_it = {"tool_calls": [{"name": "read_file", "arguments": {"path": "uploads/data.csv"}}]}
    fake_llm.load([*APPROVE_THEN_SEND_FILE, read_it, {"text": "got the csv"}])
    settings = _settings(tmp_path, fake_llm.url, synapse, bot, alice).model_copy(
        update={"toolsets": ["files", "test", "gateway"]}
    )
    # the question waits longer than any wait below: a slow machine fails a wait, not the answer
    with Running(settings, asking_registry(timeout=300)) as gateway:
        _online(gateway)
        room = alice.create_room([bot])
        _joined(alice, room, bot)
        alice.say(room, "open 7000 and send me the notes")
        prompt = alice.hear(room, type="m.room.message")
        while "Expose port 7000?" not in text_of(prompt):
            prompt = alice.hear(room, type="m.room.message")
        assert "React with ✅ once · 2️⃣ always · ❌ no" in text_of(prompt)
        offered = [alice.hear(room, type="m.reaction")["content"]["m.relates_to"] for _ in range(3)]
        assert [r["key"] for r in offered] == ["✅", "2️⃣", "❌"]
        assert {r["event_id"] for r in offered} == {prompt["event_id"]}
        alice.react(room, prompt["event_id"], "✅")
        sent = alice.hear(room, type="m.room.message")
        while sent["content"].get("msgtype") != "m.file":
            sent = alice.hear(room, type="m.room.message")
        wait_answered(gateway, 2)
        url = alice.upload("data.csv", b"a,b\n1,2\n", "text/csv")
        alice.send(room, {"msgtype": "m.file", "body": "data.csv", "url": url,
                          "info": {"mimetype": "text/csv", "size": 8}})  # fmt: skip
        wait_answered(gateway, 3)
    assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: once"
    assert sent["content"]["body"] == "n.md" and alice.download(sent["content"]["url"]) == b"# n\n"
    assert any(text_of(e).endswith("→ once") for e in alice.timeline if edits_of(e) == prompt["event_id"])
    told, read = (fake_llm.requests[i]["messages"][-1]["content"] for i in (-2, -1))
    assert "uploads/data.csv (8 bytes)" in told
    assert "a,b" in read and "1,2" in read, "the file was downloaded into uploads/"


def test_an_approval_is_answered_by_a_reply_naming_the_choice(
    tmp_path: Path, fake_llm: Any, synapse: Synapse, bot: str, alice: MatrixUser
) -> None:
    fake_llm.load([{"tool_calls": [{"name": "open_port", "arguments": {"port": 9000}}]}, {"text": "Opened."}])
    settings = _settings(tmp_path, fake_llm.url, synapse, bot, alice).model_copy(
        update={"toolsets": ["files", "test"]}
    )
    with Running(settings, asking_registry(timeout=300)) as gateway:
        room = alice.create_room([bot])
        alice.say(room, "open 9000")
        prompt = alice.hear(room, type="m.room.message")
        while "Expose port 9000?" not in text_of(prompt):
            prompt = alice.hear(room, type="m.room.message")
        quoted = f"> <{bot}> Expose port 9000?\n\nalways"  # a rich reply's fallback, then the answer
        alice.say(room, quoted, **{"m.relates_to": {"m.in_reply_to": {"event_id": prompt["event_id"]}}})
        wait_answered(gateway, 2)
    assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: always"


def test_an_encrypted_room_is_told_why_and_left(
    tmp_path: Path, fake_llm: Any, synapse: Synapse, bot: str, alice: MatrixUser
) -> None:
    fake_llm.load([])
    encryption = {
        "type": "m.room.encryption",
        "state_key": "",
        "content": {"algorithm": "m.megolm.v1.aes-sha2"},
    }
    with Running(_settings(tmp_path, fake_llm.url, synapse, bot, alice)):
        room = alice.create_room([bot], initial_state=[encryption])
        notice = alice.hear(room, type="m.room.message")
        left = alice.hear(room, type="m.room.member", sender=bot)
    assert notice["content"]["msgtype"] == "m.notice" and "end-to-end encrypted" in text_of(notice)
    assert left["content"]["membership"] == "leave"
    assert fake_llm.requests == []


def test_a_long_reply_is_split_at_the_event_limit(
    tmp_path: Path, fake_llm: Any, synapse: Synapse, bot: str, alice: MatrixUser
) -> None:
    reply = " ".join(f"wörd{i}" for i in range(2500))  # 19,889 characters, 22,389 UTF-8 bytes
    fake_llm.load([{"text": reply}])
    with Running(_settings(tmp_path, fake_llm.url, synapse, bot, alice)) as gateway:
        room = alice.create_room([bot])
        alice.say(room, "a long one please")
        wait_answered(gateway, 1)
        wait_for(lambda: alice.texts(room, bot) and alice.texts(room, bot)[-1].endswith("wörd2499"))
    parts = alice.texts(room, bot)
    assert len(parts) > 1 and all(len(p.encode()) <= 12000 for p in parts), "split by UTF-8 bytes"
    assert " ".join(parts).split() == reply.split()


def test_a_wrong_password_is_refused(synapse: Synapse, bot: str) -> None:
    from control_plane.config.chat import MatrixSettings
    from control_plane.gateway.matrix import MatrixAdapter

    async def connect() -> str:
        settings = MatrixSettings.model_validate(matrix_config(synapse, bot, password="wrong"))
        adapter = MatrixAdapter(settings, None)  # type: ignore[arg-type]  # no store before a login
        with pytest.raises(AdapterError) as failed:
            await adapter.connect()
        return str(failed.value)

    assert "M_FORBIDDEN" in asyncio.run(connect())


def test_a_kill_9_mid_reply_is_answered_once_after_the_restart(
    tmp_path: Path, fake_llm: Any, synapse: Synapse, bot: str, alice: MatrixUser
) -> None:
    from gateway_process import SCRIPT, answered_once_after_restart, gateway_profile, kill_9_while_replying

    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    env = gateway_profile(
        tmp_path, fake_llm.url, "matrix", matrix_config(synapse, bot, allow_users=[alice.user_id])
    )
    room = alice.create_room([bot])

    def ask() -> None:
        _joined(alice, room, bot)
        alice.say(room, "question one")

    kill_9_while_replying(env, ask, lambda: wait_for(lambda: any(edits_of(e) for e in alice.timeline)))
    alice.say(room, "sent while the gateway was down")
    answered_once_after_restart(env, "matrix", lambda: alice.texts(room, bot), wait_for, fake_llm)
