"""The learning loop: which turns get reviewed, and the review itself through the real loop."""

from __future__ import annotations

from typing import Any

import pytest

from control_plane.learning import TurnRecord, review_reasons, transcript


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
