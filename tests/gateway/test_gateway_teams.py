"""The gateway on Microsoft Teams: the Teams SDK's token validator and HTTP client against the Bot Framework
stand-in (tests/standins/teams_standin.py: OpenID metadata, key set, token endpoint, connector), the
stand-in posting JWT-signed activities to the gateway's messaging endpoint, the scripted model behind it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import Running, asking_registry, gateway_settings, wait_answered
from gateway_process import SCRIPT, answered_once_after_restart, gateway_profile, kill_9_while_replying
from teams_standin import TeamsStandin

from control_plane.gateway import Gateway, send_message
from control_plane.gateway.base import AdapterError
from control_plane.gateway.teams import TEXT_LIMIT

OWNER = "0b5a1e6e-1111-4c2e-9d3a-00000000a11c"
"""The owner's Entra object id (aadObjectId), as the adapter names users."""
OTHER = "7c9d2f40-2222-4b1a-8e5f-00000000b0b0"
GROUP = "19:meeting_abc@thread.v2"


@pytest.fixture
def teams() -> Iterator[TeamsStandin]:
    server = TeamsStandin()
    yield server
    server.close()


def _settings(tmp_path: Path, llm_url: str, teams: TeamsStandin, **extra: Any) -> Any:
    config = teams.gateway_config([OWNER], **extra)
    return gateway_settings(tmp_path, llm_url, None, gateway={"teams": config})


def _listening(gateway: Gateway) -> None:
    adapter: Any = gateway.adapters["teams"]
    deadline = time.monotonic() + 30
    while adapter.port in (None, 0):
        assert time.monotonic() < deadline, "the messaging endpoint never listened"
        time.sleep(0.02)


def test_a_signed_message_is_answered_in_a_streamed_reply_and_a_redelivery_once(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    fake_llm.load([{"text": "**Hello** from the agent", "pace": 0.01}, {"text": "second"}])
    with Running(_settings(tmp_path, fake_llm.url, teams)) as gateway:
        said = teams.user_says(OWNER, "hello from teams")
        assert gateway.store.last_inbound("teams") is not None, "stored before the 200"
        wait_answered(gateway, 1)
        chat = f"a:{OWNER}"
        assert teams.texts(chat) == ["**Hello** from the agent"]
        (reply,) = teams.messages(chat)
        assert reply["textFormat"] == "markdown" and reply["reply_to"] == said["id"]
        assert any(a.get("type") == "typing" for a in teams.activities), "a typing indicator first"
        assert teams.post(said) == 200  # Teams' redelivery of the same activity id: not answered again
        teams.user_says(OWNER, "and again")
        wait_answered(gateway, 2)
        assert teams.texts(chat)[1:] == ["second"] and len(fake_llm.requests) == 2
        assert len(teams.tokens) == 1, "the bot token is fetched once and reused until it expires"


@pytest.mark.parametrize(
    "forgery",
    [
        "no header",
        "another key",
        "unknown key id",
        "wrong audience",
        "expired",
        "other service url",
        "garbage",
    ],
)
def test_a_bad_or_missing_token_is_401_and_nothing_is_stored_or_answered(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin, forgery: str
) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa

    with Running(_settings(tmp_path, fake_llm.url, teams)) as gateway:
        _listening(gateway)
        activity = teams.activity(OWNER, "let me in")
        if forgery == "another key":
            real = teams.key
            teams.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            token: str | None = teams.sign()
            teams.key = real
        elif forgery == "unknown key id":
            real_kid, teams.kid = teams.kid, "a-key-the-key-set-does-not-hold"
            token = teams.sign()
            teams.kid = real_kid
        else:
            token = {
                "no header": None,
                "wrong audience": teams.sign(aud="someone-elses-bot"),
                "expired": teams.sign(exp=int(time.time()) - 3600),
                "other service url": teams.sign(serviceurl="https://smba.example.invalid/"),
                "garbage": "not.a.jwt",
            }[forgery]
        assert teams.post(activity, token) == 401
        assert gateway.store.last_inbound("teams") is None
        assert fake_llm.requests == [] and teams.activities == []


def test_a_body_that_is_no_activity_is_400_when_signed_401_when_not(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    with Running(_settings(tmp_path, fake_llm.url, teams)) as gateway:
        _listening(gateway)
        junk = {"type": "message", "conversation": "not an object"}
        assert teams.post(junk) == 400
        assert teams.post(junk, None) == 401
        assert teams.post({"type": "conversationUpdate", **_envelope(teams)}) == 200
        assert gateway.store.last_inbound("teams") is None and teams.activities == []


def _envelope(teams: TeamsStandin) -> dict[str, Any]:
    """The fields every activity has, without the message's."""
    found = teams.activity(OWNER)
    return {k: found[k] for k in ("id", "serviceUrl", "channelId", "from", "recipient", "conversation")}


def test_a_stranger_gets_a_pairing_code_and_a_command_is_answered_without_the_model(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    with Running(_settings(tmp_path, fake_llm.url, teams)) as gateway:
        teams.user_says(OTHER, "let me in")
        (told,) = teams.wait_for(lambda: teams.texts(f"a:{OTHER}"))
        assert "hermetic gateway pair" in told
        teams.user_says(OWNER, "/help")
        wait_answered(gateway, 1)
        (helped,) = teams.texts(f"a:{OWNER}")
        assert "/new" in helped and fake_llm.requests == []


def test_in_a_group_chat_only_a_mention_is_answered_without_the_mention(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    fake_llm.load([{"text": "answered the mention"}])
    with Running(_settings(tmp_path, fake_llm.url, teams, allow_chats=[GROUP])) as gateway:
        teams.user_says(OTHER, "chatter between people", conversation=GROUP, group=True)
        teams.user_says(OTHER, "what is 2+2?", conversation=GROUP, group=True, mention=True)
        wait_answered(gateway, 1)
        assert teams.texts(GROUP) == ["answered the mention"]
        assert len(fake_llm.requests) == 1
        assert fake_llm.requests[0]["messages"][-1]["content"].endswith("what is 2+2?")
        assert "<at>" not in fake_llm.requests[0]["messages"][-1]["content"]


def test_a_long_reply_is_split_into_messages_within_the_limit(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    long = " ".join(f"word{i}" for i in range(TEXT_LIMIT // 3))
    fake_llm.load([{"text": long}])
    with Running(_settings(tmp_path, fake_llm.url, teams)) as gateway:
        teams.user_says(OWNER, "write a lot")
        wait_answered(gateway, 1)
        texts = teams.texts(f"a:{OWNER}")
        assert len(texts) >= 2 and all(len(t.encode()) <= TEXT_LIMIT for t in texts)
        assert " ".join(t.strip() for t in texts).split() == long.split()


def test_an_approval_card_is_answered_by_the_owner_and_refused_to_anyone_else(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    fake_llm.load([{"tool_calls": [{"name": "open_port", "arguments": {"port": 9000}}]}, {"text": "Opened."}])
    settings = _settings(tmp_path, fake_llm.url, teams, allow_chats=[GROUP])
    settings = settings.model_copy(update={"toolsets": ["files", "test"]})
    with Running(settings, asking_registry(timeout=300)):
        teams.user_says(OWNER, "open 9000", conversation=GROUP, group=True, mention=True)
        (card,) = teams.wait_for(lambda: [m for m in teams.messages(GROUP) if m.get("attachments")])
        content = card["attachments"][0]["content"]
        assert card["attachments"][0]["contentType"] == "application/vnd.microsoft.card.adaptive"
        actions = {a["title"]: a for a in content["actions"]}
        assert list(actions) == ["once", "always", "no"]
        assert {a["type"] for a in actions.values()} == {"Action.Submit"}
        value = actions["always"]["data"]
        teams.user_says(OTHER, "", conversation=GROUP, group=True, value=value)
        teams.wait_for(lambda: any("Only an allowed user" in t for t in teams.texts(GROUP)))
        forged = value | {"hermetic": value["hermetic"].replace("always", "once")}
        teams.user_says(OWNER, "", conversation=GROUP, group=True, value=forged)  # a signature for other data
        assert len(fake_llm.requests) == 1, "neither press answered the approval"
        teams.user_says(OWNER, "", conversation=GROUP, group=True, value=value)
        fake_llm.wait_requests(2)
        assert fake_llm.requests[1]["messages"][-1]["content"] == "answer: always"
        teams.wait_for(lambda: "Opened." in teams.texts(GROUP))
        (answered,) = [m for m in teams.messages(GROUP) if m["id"] == card["id"]]
        assert not answered.get("attachments") and "→ always" in answered["text"]


def test_a_delivery_reaches_a_conversation_by_its_id_after_the_gateway_stopped(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    """The service URL a conversation's activities named is kept in the store; the target keeps the
    colons of Teams' conversation id."""
    fake_llm.load([{"text": "hi"}])
    settings = _settings(tmp_path, fake_llm.url, teams)
    with Running(settings) as gateway:
        teams.user_says(OWNER, "hello")
        wait_answered(gateway, 1)
    ids = asyncio.run(send_message(settings, f"teams:a:{OWNER}", "the nightly report"))
    assert len(ids) == 1 and teams.texts(f"a:{OWNER}") == ["hi", "the nightly report"]
    with pytest.raises(AdapterError, match="no service URL known"):
        asyncio.run(send_message(settings, "teams:19:never-seen@thread.v2", "lost"))


def test_a_bot_token_about_to_expire_is_fetched_afresh(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    teams.expires_in = 0  # kept for half its life, or until five minutes before its end: never reused
    fake_llm.load([{"text": "one"}, {"text": "two"}])
    with Running(_settings(tmp_path, fake_llm.url, teams)) as gateway:
        teams.user_says(OWNER, "first")
        wait_answered(gateway, 1)
        before = len(teams.tokens)
        teams.user_says(OWNER, "second")
        wait_answered(gateway, 2)
        assert len(teams.tokens) > before >= 2 and teams.texts(f"a:{OWNER}") == ["one", "two"]


def test_a_kill_9_mid_reply_and_a_message_sent_while_down_are_each_answered_once(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    gateway_settings(tmp_path, fake_llm.url, None)  # skips when the local backend cannot run
    fake_llm.load(SCRIPT)
    env = gateway_profile(tmp_path, fake_llm.url, "teams", teams.gateway_config([OWNER]))
    kill_9_while_replying(
        env,
        lambda: teams.user_says(OWNER, "question one"),  # POSTed until the gateway listens and stores
        lambda: teams.wait_for(lambda: any(a["method"] == "PUT" for a in teams.activities)),
    )
    # sent while no gateway listens: POSTed again until the restarted gateway answers 200
    later = threading.Thread(target=teams.user_says, args=(OWNER, "sent while the gateway was down"))
    later.start()
    answered_once_after_restart(env, "teams", lambda: teams.texts(f"a:{OWNER}"), teams.wait_for, fake_llm)
    later.join(60)


def test_a_message_answered_after_a_restart_is_a_reply_to_it(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    """The activity a reply answers is read back from the store when the gateway has not heard from the
    conversation since it started: the stored message's rerun still threads under it."""
    fake_llm.load([{"text": "never heard", "delay": 120}, {"text": "answered after the restart"}])
    settings = _settings(tmp_path, fake_llm.url, teams)
    with Running(settings):
        said = teams.user_says(OWNER, "a question")
        _until(lambda: len(fake_llm.requests) == 1)  # its turn waits on the model as the gateway stops
    with Running(settings) as gateway:
        wait_answered(gateway, 1)
    (reply,) = teams.messages(f"a:{OWNER}")
    assert reply["text"] == "answered after the restart" and reply["reply_to"] == said["id"]


def test_a_chats_messages_are_stored_in_the_order_they_came_while_a_token_check_waits(
    tmp_path: Path, fake_llm: Any, teams: TeamsStandin
) -> None:
    """Each token is checked in a worker thread; when the first message's check is slow (held here: a
    key set fetched afresh, a loaded machine), the chat's next message waits its turn, not past it."""
    fake_llm.load([{"text": "one"}, {"text": "two"}])
    with Running(_settings(tmp_path, fake_llm.url, teams)) as gateway:
        _listening(gateway)
        adapter: Any = gateway.adapters["teams"]
        first, second = teams.activity(OWNER, "first"), teams.activity(OWNER, "second")
        held, checking, release = teams.sign(jti="held"), threading.Event(), threading.Event()
        real = adapter._validator.validate_token

        async def held_check(raw: str, service_url: str | None = None) -> Any:
            if raw == held:  # runs in the worker thread: only this check waits
                checking.set()
                release.wait(60)
            return await real(raw, service_url)

        adapter._validator.validate_token = held_check
        posts = [threading.Thread(target=teams.post, args=(first, held))]
        posts[0].start()
        assert checking.wait(60)
        posts.append(threading.Thread(target=teams.post, args=(second,)))
        posts[1].start()
        _until(lambda: gateway.store.last_inbound("teams") or _queued(adapter, f"a:{OWNER}") == 2)
        release.set()
        for post in posts:
            post.join(60)
        wait_answered(gateway, 2)
    assert [r["messages"][-1]["content"] for r in fake_llm.requests] == ["first", "second"]
    # "second" has a turn of its own, or (stored while the first turn still ran) steers it: one reply
    assert "\n\n".join(teams.texts(f"a:{OWNER}")) == "one\n\ntwo"


def _queued(adapter: Any, chat: str) -> int:
    """How many messages of `chat` are being checked and stored, or wait for their turn."""
    return int(adapter._order.pending(chat))


def _until(check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "never came to pass"
        time.sleep(0.02)
