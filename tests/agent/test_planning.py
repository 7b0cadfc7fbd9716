"""The todo and clarify tools: through the agent loop, the CLI (a subprocess, with and without a
terminal) and the HTTP API (SSE and the answer endpoint), with the scripted model and real sandboxes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pty
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import get_backend
from hermetic_cli import scripted_env
from served_app import scripted_profiles, serve_app

from control_plane.agent.agent import Agent
from control_plane.agent.loop import Conversation
from control_plane.api.app import create_app
from control_plane.config.settings import CompressionSettings, Settings, load_settings
from control_plane.events import Event, TurnEnd
from control_plane.store.tokens import TokenStore

WORDS = "python3 -c \"print(' '.join('word%d' % i for i in range(300)))\""  # about 700 tokens of output
PLAN = [
    {"id": "1", "content": "read the spec", "status": "in_progress"},
    {"id": "2", "content": "write the parser"},
]


def settings_for(root: Path, url: str, **overrides: Any) -> Settings:
    get_backend("local")
    model = {"name": "openai/scripted", "api_base": url, "api_key": "test-key-123456", "retries": 0}
    overrides.setdefault("learning", {"enabled": False})
    return load_settings(root=root, model=model, backend="local", **overrides)


def call(name: str, match: str | None = None, **arguments: Any) -> dict[str, Any]:
    turn: dict[str, Any] = {"tool_calls": [{"name": name, "arguments": arguments}]}
    return turn | ({"match": match} if match else {})


def run(conversation: Conversation, text: str, on_event: Callable[[Event], None] | None = None) -> Any:
    events: list[Event] = []

    def emit(event: Event) -> None:
        events.append(event)
        if on_event:
            on_event(event)

    end: TurnEnd = asyncio.run(conversation.run(text, emit))
    return end, events


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def test_the_plan_is_shown_kept_with_the_session_and_survives_compression(
    tmp_path: Path, fake_llm: Any
) -> None:
    settings = settings_for(tmp_path, fake_llm.url, toolsets=["terminal", "todo"])
    probe = Agent(settings)  # a window the history outgrows after two commands
    from control_plane.agent.compression import Compressor

    counted = Compressor(settings.compression, probe.router).count(
        [{"role": "system", "content": probe.system_prompt()}],
        "openai/scripted",
        [tool.schema() for tool in probe.tools.values()],
    )
    probe.close()
    window = int((counted + 1000) / 0.75)
    agent = Agent(settings.model_copy(update={"compression": CompressionSettings(context_window=window)}))
    task = "MAIN: plan, then print words"
    fake_llm.load(
        [
            call("todo", task, items=PLAN),
            call("todo", task, items=[{"id": "1", "content": "read the spec", "status": "done"}], merge=True),
            call("terminal", task, command=WORDS),
            call("terminal", task, command=WORDS),
            call("terminal", task, command=WORDS),
            {"match": task, "text": "words printed"},
            *[{"match": "The turns to summarize", "text": "## Goal\n- print words"}] * 5,
        ]
    )
    conversation = agent.new_conversation()
    end, events = run(conversation, task)
    assert end.reason == "done"
    plans = [[(i.id, i.status) for i in e.items] for e in events if e.type == "todo"]
    assert plans == [[("1", "in_progress"), ("2", "pending")], [("1", "done"), ("2", "pending")]]
    assert "plan: 1 of 2 done\n[x] 1. read the spec\n[ ] 2. write the parser" in tool_results(
        fake_llm.requests[2]
    )
    assert any(e.type == "notice" and "context compressed" in e.message for e in events)
    mains = [r for r in fake_llm.requests if r.get("tools")]
    assert "Your plan so far" not in mains[0]["messages"][0]["content"]
    last_system = mains[-1]["messages"][0]["content"]  # after the compression: the plan in the prompt
    assert "Your plan so far" in last_system and "[ ] 2. write the parser" in last_system
    conversation.close()
    agent.close()

    again = Agent(settings)  # kept with the session: a resumed conversation has the same plan
    resumed = again.resume(conversation.id)
    assert [(i.id, i.status) for i in resumed.todo] == [("1", "done"), ("2", "pending")]
    fake_llm.load([call("todo"), {"text": "read it"}])
    run(resumed, "what is the plan?")
    assert tool_results(fake_llm.requests[1])[-1].startswith("plan: 1 of 2 done")
    again.close()


def test_clarify_waits_for_the_answer_and_runs_alone(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(
        [
            {
                "tool_calls": [
                    {
                        "name": "clarify",
                        "arguments": {"question": "which colour?", "choices": ["red", "blue"]},
                    },
                    {"name": "read_file", "arguments": {"path": "nothing-here"}},
                ]
            },
            {"text": "blue it is"},
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url))
    conversation = agent.new_conversation()
    order: list[str] = []

    def answer(event: Event) -> None:
        order.append(event.type)
        if event.type == "question":
            assert event.kind == "clarify" and event.choices == ["red", "blue"]
            with pytest.raises(ValueError):
                conversation.answer(event.id, "green")
            threading.Thread(target=conversation.answer, args=(event.id, "blue")).start()

    end, events = run(conversation, "paint it", answer)
    assert end.reason == "done"
    assert tool_results(fake_llm.requests[1])[0] == "the user answered: blue"
    # clarify is never parallel: the read starts only after the question was answered
    tools = [t for t in order if t in ("tool_start", "tool_end", "question", "answered")]
    assert tools == ["tool_start", "question", "answered", "tool_end", "tool_start", "tool_end"]
    agent.close()


def test_clarify_without_an_answer_in_time_goes_on(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load([call("clarify", question="which branch?"), {"text": "assumed main"}])
    agent = Agent(settings_for(tmp_path, fake_llm.url, agent={"question_timeout": 0.3}))
    end, events = run(agent.new_conversation(), "deploy")
    assert end.reason == "done"
    assert tool_results(fake_llm.requests[1])[0].startswith("no answer from the user")
    assert [e.by for e in events if e.type == "answered"] == ["timeout"]
    agent.close()


# -- the CLI ---------------------------------------------------------------------------------------


def cli_env(tmp_path: Path, fake_llm: Any) -> dict[str, str]:
    get_backend("local")
    return scripted_env(tmp_path, fake_llm.url, HERMETIC_LEARNING__ENABLED="false")


CLARIFY_SCRIPT = [
    call("todo", items=PLAN),
    call("clarify", question="which colour?", choices=["red", "blue"]),
    {"text": "painted"},
]


def test_cli_asks_at_the_terminal_and_shows_the_plan(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(CLARIFY_SCRIPT)
    leader, follower = pty.openpty()  # stdin is a terminal; the answer is typed ahead (choice 2)
    os.write(leader, b"2\n")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "control_plane", "run", "paint the fence"],
            stdin=follower,
            capture_output=True,
            text=True,
            timeout=240,
            env=cli_env(tmp_path, fake_llm),
        )
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 0, done.stderr
    assert "plan 0/2 done" in done.stdout and "read the spec" in done.stdout
    assert "? which colour?  [1] red  [2] blue" in done.stdout and "→ blue" in done.stdout
    assert tool_results(fake_llm.requests[2])[-1] == "the user answered: blue"


def test_cli_without_a_terminal_gets_no_answer(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(CLARIFY_SCRIPT)
    done = subprocess.run(  # the default wait is 300 s: only an immediate "nobody" finishes in time
        [sys.executable, "-m", "control_plane", "run", "paint the fence"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(tmp_path, fake_llm),
    )
    assert done.returncode == 0, done.stderr
    assert "→ no answer (no terminal)" in done.stdout
    assert tool_results(fake_llm.requests[2])[-1].startswith("no answer from the user")


# -- the API ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def served(root: Path, fake_llm: Any, question_timeout: float) -> Iterator[tuple[str, dict[str, str]]]:
    """The API on a free port; yields its URL and a token's header."""
    get_backend("local")
    settings_for = scripted_profiles(root, fake_llm.url, agent={"question_timeout": question_timeout})
    tokens = {"Authorization": f"Bearer {TokenStore(root).create('alpha')}"}
    with serve_app(create_app(root, settings_for)) as url:
        yield url, tokens


@pytest.fixture
def api(tmp_path: Path, fake_llm: Any) -> Iterator[tuple[str, dict[str, str]]]:
    with served(tmp_path, fake_llm, question_timeout=60) as server:
        yield server


def test_api_run_without_an_answer_in_time_goes_on(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(CLARIFY_SCRIPT)
    with (
        served(tmp_path, fake_llm, question_timeout=0.5) as (url, headers),
        httpx.Client(base_url=url, headers=headers, timeout=60) as client,
    ):
        session = client.post("/sessions", json={}).json()["id"]
        after = client.post(f"/sessions/{session}/messages", json={"content": "paint"}).json()["after"]
        with client.stream("GET", f"/sessions/{session}/events?after={after}&until_turn_end=true") as sse:
            seen = [json.loads(line[6:]) for line in sse.iter_lines() if line.startswith("data: ")]
    answered = next(e for e in seen if e["type"] == "answered")
    assert answered["answer"] is None and answered["by"] == "timeout"
    assert seen[-1]["type"] == "turn_end" and seen[-1]["reason"] == "done"
    assert tool_results(fake_llm.requests[2])[-1].startswith("no answer from the user")


def test_api_streams_the_plan_and_takes_the_answer(api: tuple[str, dict[str, str]], fake_llm: Any) -> None:
    url, headers = api
    fake_llm.load(CLARIFY_SCRIPT)
    seen: list[dict[str, Any]] = []
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        session = client.post("/sessions", json={}).json()["id"]
        after = client.post(f"/sessions/{session}/messages", json={"content": "paint"}).json()["after"]
        events = f"/sessions/{session}/events?after={after}&until_turn_end=true"
        with (
            httpx.Client(base_url=url, headers=headers, timeout=60) as other,
            client.stream("GET", events) as sse,
        ):
            for line in sse.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                seen.append(event)
                if event["type"] == "question":
                    assert other.get(f"/sessions/{session}/questions").json()[0]["id"] == event["id"]
                    answer = f"/sessions/{session}/questions/{event['id']}"
                    wrong = other.post(answer, json={"answer": "green"})
                    assert wrong.status_code == 422 and "red, blue" in wrong.json()["detail"][0]["msg"]
                    assert other.post(answer, json={"answer": "blue"}).json() == {"answered": True}
                    assert other.post(answer, json={"answer": "red"}).status_code == 404
                    assert (
                        other.post(f"/sessions/{session}/questions/nope", json={"answer": "x"}).status_code
                        == 404
                    )
                    assert other.post(answer, json={}).status_code == 422
    plan = next(e for e in seen if e["type"] == "todo")
    assert [i["content"] for i in plan["items"]] == ["read the spec", "write the parser"]
    answered = next(e for e in seen if e["type"] == "answered")
    assert answered["answer"] == "blue" and answered["by"] == "user"
    assert seen[-1]["type"] == "turn_end" and seen[-1]["reason"] == "done"
    assert tool_results(fake_llm.requests[2])[-1] == "the user answered: blue"


# -- a delegate call's children on the surfaces ----------------------------------------------------

DELEGATE_SCRIPT = [
    {
        "match": "MAIN",
        "tool_calls": [{"name": "delegate", "arguments": {"tasks": [{"goal": "child-A: echo"}]}}],
    },
    {
        "match": "child-A",
        "tool_calls": [{"name": "terminal", "arguments": {"command": "echo from-the-child"}}],
    },
    {"match": "child-A", "text": "A finished"},
    {"match": "MAIN", "text": "the child finished"},
]


def test_cli_shows_the_children_under_the_delegate_call(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(DELEGATE_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "control_plane", "run", "MAIN: delegate"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
        env=cli_env(tmp_path, fake_llm),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("▸ delegate")))
    assert lines[start + 1] == "  1 child (fresh sandbox): child-A: echo"
    assert lines[start + 2] == "  1 ▸ terminal echo from-the-child"
    assert lines[start + 3] == "  1 done after 2 step(s): A finished"
    assert "from-the-child" not in [line.strip() for line in lines]  # a child's output is not streamed
    assert "the child finished" in done.stdout


def test_api_streams_the_children_under_the_delegate_call(
    api: tuple[str, dict[str, str]], fake_llm: Any
) -> None:
    url, headers = api
    fake_llm.load(DELEGATE_SCRIPT)
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        session = client.post("/sessions", json={}).json()["id"]
        after = client.post(f"/sessions/{session}/messages", json={"content": "MAIN: go"}).json()["after"]
        with client.stream("GET", f"/sessions/{session}/events?after={after}&until_turn_end=true") as sse:
            seen = [json.loads(line[6:]) for line in sse.iter_lines() if line.startswith("data: ")]
    call_id = next(e for e in seen if e["type"] == "tool_start" and e["name"] == "delegate")["call_id"]
    start = next(e for e in seen if e["type"] == "child_start")
    child = start["child_id"]
    assert start["call_id"] == call_id and start["session_id"] == session
    mine = [e for e in seen if e["session_id"] == child]
    assert {e["type"] for e in mine} >= {"user_message", "assistant_message", "tool_start", "tool_end"}
    assert all(e["delegate_call"] == call_id and e["depth"] == 1 for e in mine)
    assert next(e for e in seen if e["type"] == "child_end")["summary"] == "A finished"
    # the stream ends at the session's own turn_end, not the child's
    assert seen[-1]["type"] == "turn_end" and seen[-1]["session_id"] == session
    assert [e["type"] for e in seen].count("turn_end") == 1
