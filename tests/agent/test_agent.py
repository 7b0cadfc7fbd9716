"""The agent loop end to end: real litellm over HTTP to the scripted model server, real sandboxes,
real SQLite. The script decides what the model says; everything else really happens."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import docker
import pytest
from agent_runs import call, run, settings_for, tool_messages

from control_plane.agent.agent import Agent
from control_plane.agent.loop import Busy
from control_plane.config.settings import load_settings
from control_plane.events import Event, TurnEnd


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events if e.type not in ("text_delta", "usage", "tool_progress")]


def test_task_writes_runs_and_reads_in_a_docker_sandbox(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(
        [
            {
                "text": "Writing it.",
                "tool_calls": [call("write_file", path="calc.py", content="print(6 * 7)\n")],
            },
            {"tool_calls": [call("terminal", command="python3 calc.py > out.txt && echo ran")]},
            {"tool_calls": [call("read_file", path="out.txt")]},
            {"text": "The program printed 42."},
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url))
    conversation = agent.new_conversation(title="calc")
    end, events = run(conversation, "write a program that prints 6*7, run it, tell me the result")

    assert end.reason == "done" and end.content == "The program printed 42." and end.iterations == 4
    assert types(events) == [
        "user_message",
        "assistant_message", "tool_start", "tool_end",
        "assistant_message", "tool_start", "tool_end",
        "assistant_message", "tool_start", "tool_end",
        "assistant_message", "turn_end",
    ]  # fmt: skip
    assert all(e.session_id == conversation.id for e in events)
    assert "     1\t42" in tool_messages(fake_llm.requests[-1])[-1]  # the model saw the file's content
    # the same tools were offered on every call, and the system prompt came first
    assert {t["function"]["name"] for t in fake_llm.requests[0]["tools"]} >= {
        "terminal",
        "read_file",
        "patch",
    }
    assert fake_llm.requests[0]["messages"][0]["role"] == "system"

    store = agent.store
    history = store.history(conversation.id)
    assert [m["role"] for m in history] == ["system", "user"] + ["assistant", "tool"] * 3 + ["assistant"]
    audits = store.tool_calls(conversation.id)
    assert [a.tool for a in audits] == ["write_file", "terminal", "read_file"]
    assert all(a.backend == "docker" and a.sandbox_id and a.ok for a in audits)
    assert audits[1].exit_code == 0
    sandbox_id = audits[0].sandbox_id
    assert store.get_session(conversation.id, "default").message_count == len(history)

    logged = [
        json.loads(line)["type"] for line in (tmp_path / "logs" / "events.jsonl").read_text().splitlines()
    ]
    assert [t for t in logged if t != "usage"] == types(events)  # every event but the streamed pieces

    conversation.close()
    agent.close()
    client = docker.from_env()
    left = client.containers.list(all=True, filters={"label": f"org.hermetic.session={conversation.id}"})
    assert left == [], f"sandbox {sandbox_id} outlived its session"


def test_bad_tool_calls_go_back_to_the_model_and_the_run_goes_on(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(
        [
            {
                "tool_calls": [
                    {"name": "read_file", "arguments": '{"path": '},
                    {"name": "launch_missiles", "arguments": {}},
                    {"name": "terminal", "arguments": {"timeout": 5}},
                ]
            },
            {"text": "I will stop guessing."},
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend="local"))
    end, events = run(agent.new_conversation(), "try things")
    assert end.reason == "done"
    results = tool_messages(fake_llm.requests[1])
    assert "not valid JSON" in results[0]
    assert "there is no tool named 'launch_missiles'" in results[1]
    assert "invalid arguments for terminal: command: Field required" in results[2]
    assert [e.ok for e in events if e.type == "tool_end"] == [False, False, False]
    agent.close()


def test_fallback_model_answers_after_a_429(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load([{"error": 429, "message": "slow down"}, {"text": "answer from the fallback"}])
    settings = settings_for(
        tmp_path,
        fake_llm.url,
        backend="local",
        model={"fallbacks": [{"name": "openai/backup", "api_base": fake_llm.url, "api_key": "k"}]},
    )
    agent = Agent(settings)
    end, events = run(agent.new_conversation(), "hello")
    assert end.reason == "done" and end.content == "answer from the fallback"
    assert [r["model"] for r in fake_llm.requests] == ["scripted", "backup"]
    assert any(e.type == "notice" and "backup" in e.message for e in events)
    assert agent.store.messages(agent.store.list_sessions("default")[0].id)[-1].model == "openai/backup"
    agent.close()


def test_no_model_answering_ends_the_turn_with_an_error(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load([{"error": 500, "message": "boom"}])
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend="local"))
    conversation = agent.new_conversation()
    end, events = run(conversation, "hello")
    assert end.reason == "error"
    assert any(e.type == "error" and e.kind == "model" for e in events)
    fake_llm.load([{"text": "back again"}])
    assert run(conversation, "retry")[0].reason == "done"  # the conversation survives
    agent.close()


def test_iteration_budget_stops_the_run(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load([{"tool_calls": [call("terminal", command="echo step")]}] * 3)
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend="local", limits={"max_iterations": 2}))
    end, events = run(agent.new_conversation(), "loop forever")
    assert end.reason == "budget" and end.iterations == 2 and len(fake_llm.requests) == 2
    assert any(e.type == "notice" and "max_iterations" in e.message for e in events)
    agent.close()


def test_parallel_safe_calls_run_together(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(
        [
            {
                "tool_calls": [
                    call("terminal", command="sleep 0.3 & sleep 0.3 & wait; echo a > a.txt; echo b > b.txt")
                ]
            },
            {"tool_calls": [call("read_file", path="a.txt"), call("read_file", path="b.txt")]},
            {
                "tool_calls": [
                    call("write_file", path="c.txt", content="c"),
                    call("write_file", path="d.txt", content="d"),
                ]
            },
            {"text": "done"},
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend="local"))
    end, events = run(agent.new_conversation(), "go")
    assert end.reason == "done"
    tool_events = [(e.type, getattr(e, "name", "")) for e in events if e.type in ("tool_start", "tool_end")]
    # both reads start before either ends; the writes (not parallel-safe) run one after the other
    assert tool_events[2:6] == [("tool_start", "read_file")] * 2 + [("tool_end", "read_file")] * 2
    assert tool_events[6:] == [("tool_start", "write_file"), ("tool_end", "write_file")] * 2
    reads = tool_messages(fake_llm.requests[2])[1:3]
    assert "1\ta" in reads[0] and "1\tb" in reads[1]  # results in call order
    agent.close()


def test_interrupt_stops_a_command_and_the_session_goes_on(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(
        [
            {
                "tool_calls": [
                    call("terminal", command="echo started; sleep 60"),
                    call("terminal", command="echo never"),
                ]
            }
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend="local"))
    conversation = agent.new_conversation()
    events: list[Event] = []

    def on_event(event: Event) -> None:
        events.append(event)
        # interrupt once the command is known to run (not after a delay: a slow sandbox start would
        # let the interrupt land before the command, and the test would prove nothing)
        if event.type == "tool_progress" and "started" in event.text:
            threading.Thread(target=conversation.interrupt).start()

    end = asyncio.run(conversation.run("sleep", on_event))
    assert end.reason == "interrupted"
    ends = [e for e in events if e.type == "tool_end"]
    assert len(ends) == 1 and not ends[0].ok  # the second call never started
    fake_llm.load([{"text": "ok, stopped"}])
    assert run(conversation, "what happened?")[0].reason == "done"
    results = tool_messages(fake_llm.requests[-1])
    assert len(results) == 2 and "not run: the user interrupted" in results[1]
    agent.close()


def test_interrupt_cancels_a_slow_model_call(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load([{"text": "too late", "delay": 30}])
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend="local"))
    conversation = agent.new_conversation()
    threading.Timer(0.5, conversation.interrupt).start()
    end, events = run(conversation, "think hard")
    assert end.reason == "interrupted"
    assert not any(e.type == "assistant_message" for e in events)
    agent.close()


def test_steer_adds_a_message_after_the_current_batch(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(
        [{"tool_calls": [call("terminal", command="sleep 1; echo slept")]}, {"text": "hi, and done"}]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend="local"))
    conversation = agent.new_conversation()
    events: list[Event] = []

    def on_event(event: Event) -> None:
        events.append(event)
        if event.type == "tool_start":
            assert conversation.steer("also say hi")

    async def steered() -> TurnEnd:
        running = asyncio.create_task(conversation.run("sleep a bit", on_event))
        await asyncio.sleep(0)
        with pytest.raises(Busy):  # one run at a time; a second message must steer instead
            await conversation.run("x", events.append)
        return await running

    end = asyncio.run(steered())
    assert end.reason == "done"
    last = fake_llm.requests[-1]["messages"]
    assert [m["role"] for m in last[-3:]] == ["assistant", "tool", "user"] and last[-1][
        "content"
    ] == "also say hi"
    assert any(e.type == "user_message" and e.steer for e in events)
    assert not conversation.steer("idle now")  # nothing running: a steer is refused
    agent.close()


def test_resumed_conversation_continues_the_history(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load([{"tool_calls": [call("terminal", command="echo remembered")]}, {"text": "first answer"}])
    settings = settings_for(tmp_path, fake_llm.url, backend="local")
    agent = Agent(settings)
    first = agent.new_conversation()
    run(first, "first question")
    first.close()
    agent.close()

    fake_llm.load([{"text": "second answer"}])
    again = Agent(settings)
    resumed = again.resume(first.id)
    assert run(resumed, "second question")[0].content == "second answer"
    sent = fake_llm.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert "remembered" in sent[3]["content"] and sent[-1]["content"] == "second question"
    with pytest.raises(KeyError):
        again.resume("s-does-not-exist")
    other = Agent(load_settings(root=tmp_path, profile="other", model=settings.model.model_dump()))
    with pytest.raises(KeyError):  # another profile cannot resume it
        other.resume(first.id)
    again.close()


def test_secrets_are_redacted_before_the_model_sees_them(tmp_path: Path, fake_llm: Any) -> None:
    command = "echo $SERVICE_TOKEN; echo $PLAIN; echo test-key-123456; echo sk-ant-abcdefghijklmnopqrstuvwxyz"
    fake_llm.load([{"tool_calls": [call("terminal", command=command)]}, {"text": "ok"}])
    env = {"SERVICE_TOKEN": "tok-abcdef-987654", "PLAIN": "visible-value"}
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend="local", sandbox={"env": env}))
    run(agent.new_conversation(), "show secrets")
    seen = tool_messages(fake_llm.requests[-1])[0]
    assert "tok-abcdef-987654" not in seen  # a sandbox variable named like a secret
    assert "test-key-123456" not in seen  # the model's own API key
    assert "sk-ant-abc" not in seen and "[REDACTED:openai-or-anthropic-key]" in seen
    assert "visible-value" in seen
    agent.close()
    agent.close()
