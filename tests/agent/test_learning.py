"""The learning loop: which turns get reviewed, and the review itself through the real loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agent_runs import run, settings_for

from control_plane.agent.agent import Agent
from control_plane.agent.learning import REVIEW_PROMPT, TurnRecord, review_reasons, transcript


def turn(text: str = "do it", calls: list[tuple[str, bool, Any]] | None = None) -> TurnRecord:
    record = TurnRecord(user_text=text)
    for name, ok, arguments in calls or []:
        record.tool_done(name, ok, arguments)
    return record


def test_quiet_turns_are_not_reviewed() -> None:
    assert review_reasons(turn(calls=[("terminal", True, {})] * 2), 3, 10, 5) == []


def test_each_reason_is_named() -> None:
    assert review_reasons(turn(), 10, 10, 5) == ["10 user turns without a memory write"]
    assert review_reasons(turn(calls=[("read_file", True, {})] * 5), 1, 10, 5) == ["a task of 5 tool calls"]
    failed_then_ok = [("terminal", False, {}), ("patch", True, {})]
    assert review_reasons(turn(calls=failed_then_ok), 1, 10, 5) == ["recovered from a tool error"]
    assert review_reasons(turn(calls=[("terminal", False, {})]), 1, 10, 5) == []  # failed, never recovered
    assert review_reasons(turn("No, I said use pytest"), 1, 10, 5) == ["the user corrected the agent"]
    assert review_reasons(turn("notes about nothing"), 1, 10, 5) == []
    assert review_reasons(turn(), 50, 0, 5) == []  # nudges off


@pytest.mark.parametrize(
    ("arguments", "written"),
    [
        ({"target": "memory", "ops": [{"op": "add", "text": "x"}]}, True),
        ({"target": "user", "op": "read"}, False),
        ('{"ops": [{"op": "remove", "match": "x"}]}', True),
    ],
)
def test_memory_writes_are_told_from_reads(arguments: object, written: bool) -> None:
    assert turn(calls=[("memory", True, arguments)]).memory_written is written
    assert turn(calls=[("memory", False, arguments)]).memory_written is False


def test_transcript_leaves_out_the_system_prompt_and_shows_tool_calls() -> None:
    text = transcript(
        [
            {"role": "system", "content": "SECRET SYSTEM PROMPT"},
            {"role": "user", "content": "fix the build"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "1",
                        "type": "function",
                        "function": {"name": "terminal", "arguments": '{"command": "make"}'},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "1",
                "name": "terminal",
                "content": "make: *** missing separator",
            },
        ]
    )
    assert "SECRET SYSTEM PROMPT" not in text
    assert (
        "[user] fix the build" in text
        and "[assistant calls terminal]" in text
        and "missing separator" in text
    )


def test_memory_is_frozen_for_the_session_and_fresh_for_the_next(tmp_path: Path, fake_llm: Any) -> None:
    add = {"target": "user", "ops": [{"op": "add", "text": "prefers tabs over spaces"}]}
    fake_llm.load(
        [{"tool_calls": [{"name": "memory", "arguments": add}]}, {"text": "noted"}, {"text": "again"}]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url))
    conversation = agent.new_conversation()
    assert run(conversation, "I like tabs")[0].reason == "done"
    assert run(conversation, "and now?")[0].reason == "done"
    systems = {r["messages"][0]["content"] for r in fake_llm.requests}
    assert len(systems) == 1  # byte-identical for every call of the session, despite the write
    assert "prefers tabs" not in systems.pop()
    assert "prefers tabs over spaces" in (tmp_path / "USER.md").read_text()
    assert "prefers tabs over spaces" in agent.new_conversation().history[0]["content"]  # the next session
    agent.close()


def test_a_busy_turn_is_reviewed_in_the_background(tmp_path: Path, fake_llm: Any) -> None:
    lesson = {
        "target": "memory",
        "ops": [{"op": "add", "text": "python3 is at /usr/bin/python3 in the sandbox"}],
    }
    fake_llm.load(
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "which python3"}}]},
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "python3 -V"}}]},
            {"text": "python3 is there."},
            # the reviewer's turns: it sees the transcript and may only use the memory tool
            {"tool_calls": [{"name": "memory", "arguments": lesson}]},
            {"text": "saved one lesson"},
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url, learning={"busy_tools": 2}))
    conversation = agent.new_conversation()
    end, events = run(conversation, "is python3 there?")
    assert end.reason == "done" and end.content == "python3 is there."
    notices = [e.message for e in events if e.type == "notice"]
    assert any("learning: reviewing" in n and "a task of 2 tool calls" in n for n in notices)
    agent.background.wait(60)

    assert "python3 is at /usr/bin/python3" in (tmp_path / "MEMORY.md").read_text()
    review_request = fake_llm.requests[3]
    assert review_request["messages"][0]["content"].startswith(REVIEW_PROMPT)
    assert "[assistant calls terminal]" in review_request["messages"][1]["content"]
    assert {t["function"]["name"] for t in review_request["tools"]} == {
        "memory",
        "skills_list",
        "skills_search",
        "skill_view",
        "skill_manage",
    }
    reviews = [s for s in agent.store.list_sessions("default") if s.source == "review"]
    assert len(reviews) == 1 and reviews[0].parent_id == conversation.id  # logged against its origin
    assert [c.tool for c in agent.store.tool_calls(reviews[0].id)] == ["memory"]
    agent.close()
