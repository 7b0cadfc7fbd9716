"""The gateway on Telegram: python-telegram-bot against the Bot API stand-in
(tests/standins/telegram_standin.py), the scripted model behind the agent, real sandboxes and the real
sessions database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gateway_harness import OWNER, Running, asking_registry, gateway_settings, wait_answered
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


def running_command(command: str, timeout: float = 30) -> None:
    """Until a process with this command line runs (local sandboxes' processes are visible on the host)."""
    import subprocess
    import time

    deadline = time.monotonic() + timeout
    while subprocess.run(["pgrep", "-f", command], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, f"{command!r} never started"
        time.sleep(0.05)


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
        wait_answered(gateway, 4)  # the turn's history is saved when it ends, after its last edit shows
        sessions = [s for s in gateway.agent.store.list_sessions("default") if s.source == "telegram"]
        assert len(sessions) == 2
        users = sorted(
            [m["content"] for m in gateway.agent.store.history(s.id) if m["role"] == "user"] for s in sessions
        )
        assert users == [["one", "two"], ["three"]]
        assert len(fake_llm.requests) == 3, "/new went to no model"


def test_an_unknown_user_gets_a_pairing_code_and_gateway_pair_admits_them(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    import re
    import subprocess
    import sys

    stranger = 2002
    fake_llm.load([{"text": "welcome aboard"}])
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.user_says(stranger, "hello?")
        told = final_text(standin, stranger, "hermetic gateway pair")
        code = re.search(r"gateway pair ([A-Z0-9]{8})", told).group(1)  # type: ignore[union-attr]
        standin.user_says(stranger, "hello again?")
        standin.user_says(OWNER, "/help")  # a later message, to know the one before was handled
        final_text(standin, OWNER, "/status")
        assert len(standin.bot_messages(stranger)) == 1, "one code per user, not one per message"
        assert fake_llm.requests == [], "nothing of a stranger's reaches the model"
        wrong = subprocess.run(
            [sys.executable, "-m", "control_plane", "gateway", "pair", "WRONG123"],
            env={"HERMETIC_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
        )  # fmt: skip
        assert wrong.returncode == 2 and "no such pairing code" in wrong.stderr
        done = subprocess.run(
            [sys.executable, "-m", "control_plane", "gateway", "pair", code],
            env={"HERMETIC_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"admitted telegram user {stranger}" in done.stdout
        again = subprocess.run(
            [sys.executable, "-m", "control_plane", "gateway", "pair", code],
            env={"HERMETIC_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
        )  # fmt: skip
        assert again.returncode == 2, "a code works once"
        standin.user_says(stranger, "now?")
        final_text(standin, stranger, "welcome aboard")
        assert gateway.store.admitted("telegram", str(stranger))


def test_group_chats_are_answered_only_when_allowed(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    fake_llm.load([{"text": "hello group"}])
    settings = gateway_settings(tmp_path, fake_llm.url, standin, allow_chats=["-600"])
    with Running(settings) as gateway:
        standin.user_says(-500, "anyone?", user=OWNER, chat_type="group")
        standin.user_says(-600, "anyone here?", user=3003, chat_type="supergroup")
        final_text(standin, -600, "hello group")
        wait_answered(gateway, 1)
        assert standin.bot_messages(-500) == [], "a group not allowed gets no answer at all"
        assert len(fake_llm.requests) == 1


def test_a_long_reply_is_split_at_4096_utf16_units_with_code_blocks_whole_in_each_part(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    code = "\n".join(f"print('line {i} 😀')" for i in range(400))
    reply = (
        "Here is the **program** 😀:\n\n```python\n" + code + "\n```\n\nThat is all. " + "🎉 " * 200 + "END"
    )
    fake_llm.load([{"text": reply}])
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.user_says(OWNER, "write a long program")
        wait_answered(gateway, 1)
        messages = standin.bot_messages(OWNER)
        assert len(messages) >= 3
        assert all(len(m.text.encode("utf-16-le")) // 2 <= 4096 for m in messages)
        assert messages[0].text.startswith("Here is the program"), "Markdown became entities"
        assert {"type": "bold", "offset": 12, "length": 7} in messages[0].entities
        for message in messages[:-1]:  # the fence was closed at each cut and reopened after it
            assert any(e["type"] == "pre" and e.get("language") == "python" for e in message.entities)
        assert messages[-1].text.endswith("END")
        joined = "\n".join(m.text for m in messages)
        assert all(f"print('line {i} 😀')" in joined for i in range(400)), "nothing is lost at the cuts"
        assert "```" not in joined


def test_a_429_on_an_edit_is_waited_out_and_the_reply_completes(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    reply = " ".join(f"token{i}" for i in range(80))
    fake_llm.load([{"text": reply, "pace": 0.01}])
    standin.rate_limit_edits(2, retry_after=1)
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.user_says(OWNER, "go")
        wait_answered(gateway, 1)
        (message,) = standin.bot_messages(OWNER)
        assert message.text == reply
        edits = standin.called("editMessageText")
        assert len(edits) >= 3, "two refused edits, then the ones that went through"
        assert message.edits >= 1


def test_stop_interrupts_the_run(tmp_path: Path, fake_llm: Any, standin: TelegramStandin) -> None:
    fake_llm.load([{"text": "Sleeping.", "tool_calls": [call("terminal", command="sleep 61.15")]}])
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.user_says(OWNER, "take a nap")
        final_text(standin, OWNER, "▸ terminal sleep 61.15")
        running_command("sleep 61.15")
        standin.user_says(OWNER, "/stop")
        final_text(standin, OWNER, "Stopping.")
        final_text(standin, OWNER, "(stopped)")
        wait_answered(gateway, 2)
        assert len(fake_llm.requests) == 1


def test_a_message_during_a_run_steers_it(tmp_path: Path, fake_llm: Any, standin: TelegramStandin) -> None:
    fake_llm.load(
        [
            {"tool_calls": [call("terminal", command="sleep 1.5; echo slept")]},
            {"text": "Done, and noted the second message."},
        ]
    )
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.user_says(OWNER, "nap a little")
        final_text(standin, OWNER, "▸ terminal")
        standin.user_says(OWNER, "and then say hi")
        wait_answered(gateway, 2)
        assert len(fake_llm.requests) == 2
        last = fake_llm.requests[1]["messages"]
        assert [m["role"] for m in last[-2:]] == ["tool", "user"] and last[-1]["content"] == "and then say hi"
        final_text(standin, OWNER, "noted the second message")


def test_an_uploaded_file_lands_in_the_sandbox_and_the_agent_reads_it(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    fake_llm.load(
        [{"tool_calls": [call("read_file", path="uploads/notes.txt")]}, {"text": "It says pelican."}]
    )
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.user_says(OWNER, "what does my file say?", document=("notes.txt", b"the word is pelican\n"))
        wait_answered(gateway, 1)
        first = fake_llm.requests[0]["messages"][-1]["content"]
        assert "what does my file say?" in first and "uploads/notes.txt" in first
        tool_result = fake_llm.requests[1]["messages"][-1]["content"]
        assert "the word is pelican" in tool_result
        final_text(standin, OWNER, "It says pelican.")


def test_the_agent_sends_a_file_from_its_sandbox(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    fake_llm.load(
        [
            {"tool_calls": [call("write_file", path="out/report.txt", content="quarterly numbers\n")]},
            {"tool_calls": [call("send_file", path="out/report.txt")]},
            {"text": "Sent you the report."},
        ]
    )
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.user_says(OWNER, "make me a report")
        wait_answered(gateway, 1)
        (document,) = [m for m in standin.bot_messages(OWNER) if m.document is not None]
        assert document.document == b"quarterly numbers\n" and document.filename == "report.txt"
        assert "sent report.txt" in fake_llm.requests[2]["messages"][-1]["content"]


def test_redelivered_message_is_answered_once(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    fake_llm.load([{"text": "answer one"}, {"text": "answer two"}])
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        update = standin.user_says(OWNER, "question one")
        wait_answered(gateway, 1)
        standin.redeliver(update)
        standin.user_says(OWNER, "question two")
        wait_answered(gateway, 2)
        final_text(standin, OWNER, "answer two")
        assert len(fake_llm.requests) == 2
        users = [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "user"]
        assert users == ["question one", "question two"]


def test_an_agent_error_ends_as_a_short_message(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    fake_llm.load([{"error": 500, "message": "the model is on fire"}])
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.user_says(OWNER, "hello")
        wait_answered(gateway, 1)
        text = final_text(standin, OWNER, "Sorry")
        assert "could not finish" in text and len(text) < 400


def test_chat_commands_answer_without_the_model(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        for command in ("/help", "/status", "/model", "/memory", "/skills"):
            standin.user_says(OWNER, command)
        wait_answered(gateway, 5)
        texts = [m.text for m in standin.bot_messages(OWNER)]
        assert "/new" in texts[0] and "/stop" in texts[0]
        assert texts[1].startswith("session s-") and "openai/scripted" in texts[1]
        assert "openai/scripted" in texts[2]
        assert "MEMORY.md" in texts[3]
        assert fake_llm.requests == []


@pytest.mark.parametrize("press", [True, False], ids=["pressed", "timed-out"])
def test_an_approval_renders_as_buttons_and_no_answer_means_no(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin, press: bool
) -> None:
    fake_llm.load([{"tool_calls": [call("open_port", port=8080)]}, {"text": "Done."}])
    settings = gateway_settings(tmp_path, fake_llm.url, standin, toolsets=["terminal", "files", "test"])
    with Running(settings, asking_registry(timeout=300 if press else 0.5)) as gateway:
        standin.user_says(OWNER, "open 8080")
        asked = standin.wait_for(lambda: next((m for m in standin.bot_messages(OWNER) if m.buttons), None))
        assert asked.text == "Expose port 8080?"
        labels = [button["text"] for button in asked.buttons[0]]
        assert labels == ["once", "always", "no"]
        if press:
            standin.press(OWNER, asked.message_id, asked.buttons[0][0]["callback_data"])
        wait_answered(gateway, 2 if press else 1)
        result = fake_llm.requests[1]["messages"][-1]["content"]
        assert result == ("answer: once" if press else "answer: None")
        shown = standin.wait_for(lambda: "→" in standin.messages[(OWNER, asked.message_id)].text and asked)
        assert shown.buttons == [], "the buttons go once answered"
        assert shown.text.endswith("→ once" if press else "treated as no")


def test_twenty_chats_at_once_are_each_answered_in_order(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    users = [5000 + n for n in range(20)]
    fake_llm.load([{"text": f"reply {n}"} for n in range(200)])
    settings = gateway_settings(tmp_path, fake_llm.url, standin, allow_users=[str(u) for u in users])
    with Running(settings) as gateway:
        for round_ in range(5):
            for user in users:
                standin.user_says(user, f"message {round_} from {user}")
        wait_answered(gateway, 100, timeout=120)
        store = gateway.agent.store
        for user in users:
            (session,) = [
                s for s in store.list_sessions("default", limit=100) if s.title == f"telegram user{user}"
            ]
            said = [m["content"] for m in store.history(session.id) if m["role"] == "user"]
            assert said == [f"message {r} from {user}" for r in range(5)]
            assert standin.bot_messages(user), f"user {user} got no answer"


def test_send_message_delivers_to_a_chat_by_target_string(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    import asyncio

    from control_plane.gateway import UnknownTarget, send_message

    settings = gateway_settings(tmp_path, fake_llm.url, standin)
    text = "Job report:\n" + "line of the report\n" * 400  # over 4,096: two messages
    ids = asyncio.run(send_message(settings, f"telegram:{OWNER}", text))
    parts = [m.text for m in standin.bot_messages(OWNER)]
    assert len(ids) == len(parts) == 2 and "".join(parts).count("line of the report") == 400
    with pytest.raises(UnknownTarget, match="no 'slack'"):
        asyncio.run(send_message(settings, "slack:C1", "hi"))
    with pytest.raises(UnknownTarget, match="platform:chat"):
        asyncio.run(send_message(settings, "telegram", "hi"))


def test_an_idle_direct_chat_starts_a_new_session(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    import time

    fake_llm.load([{"text": "first"}, {"text": "second"}])
    settings = gateway_settings(
        tmp_path, fake_llm.url, standin, gateway={"reset": "idle", "idle_hours": 0.0001}
    )
    with Running(settings) as gateway:
        standin.user_says(OWNER, "one")
        wait_answered(gateway, 1)
        time.sleep(0.5)  # longer than idle_hours (0.36 s)
        standin.user_says(OWNER, "two")
        wait_answered(gateway, 2)
        sessions = [s for s in gateway.agent.store.list_sessions("default") if s.source == "telegram"]
        assert len(sessions) == 2, "the idle chat began a new session"


def test_topics_in_a_group_are_sessions_of_their_own(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    fake_llm.load([{"text": "in topic 7"}, {"text": "in topic 8"}])
    settings = gateway_settings(tmp_path, fake_llm.url, standin, allow_chats=["-700"])
    with Running(settings) as gateway:
        standin.user_says(-700, "a", user=OWNER, chat_type="supergroup", thread=7)
        wait_answered(gateway, 1)
        standin.user_says(-700, "b", user=OWNER, chat_type="supergroup", thread=8)
        wait_answered(gateway, 2)
        threads = sorted(m.thread for m in standin.bot_messages(-700))  # type: ignore[type-var]
        assert threads == [7, 8], "each answer went to its topic"
        sessions = [s for s in gateway.agent.store.list_sessions("default") if s.source == "telegram"]
        assert len(sessions) == 2


def test_the_running_gateway_delivers_the_schedulers_results_to_a_chat_and_knows_a_sessions_chat(
    tmp_path: Path, fake_llm: Any, standin: TelegramStandin
) -> None:
    import asyncio
    import time

    from control_plane.scheduler import delivery

    fake_llm.load([{"text": "hello"}])
    with Running(gateway_settings(tmp_path, fake_llm.url, standin)) as gateway:
        standin.user_says(OWNER, "hi")
        wait_answered(gateway, 1)
        (session,) = [s for s in gateway.agent.store.list_sessions("default") if s.source == "telegram"]
        assert delivery.origin_of(session.id) == f"telegram:{OWNER}"
        message = delivery.Message(
            job_id="j1", job_name="nightly", run_id=1, status="ok", text="all green",
            session_id=None, scheduled_for=time.time(), finished_at=time.time(),
        )  # fmt: skip
        context = delivery.DeliveryContext(home=tmp_path, webhook_secret=b"x")
        outcomes = asyncio.run(delivery.deliver([f"telegram:{OWNER}"], message, context))  # another loop
        assert outcomes == [{"target": f"telegram:{OWNER}", "ok": True, "detail": "sent as 1 message(s)"}]
        assert standin.bot_messages(OWNER)[-1].text == "all green"
