"""The tool registry and the built-in tools, run against real sandboxes (local and docker)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import get_backend
from tool_calls import call

from backends import Sandbox, SandboxSpec
from control_plane.agent.agent import _repair
from control_plane.agent.calls import groups
from control_plane.models.router import ToolCall
from control_plane.safety.redaction import Redactor, clip
from control_plane.tools import TOOLS


@pytest.fixture(params=["local", "docker"], scope="module")
def box(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    with get_backend(request.param).create(SandboxSpec(memory="512m", pids=256)) as sandbox:
        yield sandbox


def test_every_tool_has_a_schema_the_model_can_use() -> None:
    tools = TOOLS.select(["terminal", "files", "browser"])
    assert {"terminal", "process", "read_file", "write_file", "patch", "search_files", "list_files"} <= set(
        tools
    )
    assert {name for name in tools if name.startswith("browser_")} >= {"browser_navigate", "browser_click"}
    for tool in tools.values():
        schema = tool.schema()["function"]
        assert schema["description"] and schema["parameters"]["type"] == "object"
    assert TOOLS.select(["files"]).keys().isdisjoint({"terminal", "browser_navigate"})
    with pytest.raises(ValueError, match="unknown toolset.*nope"):
        TOOLS.select(["files", "nope"])


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("no_such_tool", "{}", "there is no tool named 'no_such_tool'"),
        ("read_file", '{"path": "x"', "not valid JSON"),
        ("read_file", "{}", "invalid arguments for read_file: path: Field required"),
        ("read_file", '{"path": "x", "limit": -1}', "limit: Input should be greater than or equal to 1"),
        ("terminal", '["ls"]', "invalid arguments for terminal"),
    ],
)
def test_bad_calls_become_readable_results(name: str, arguments: str, expected: str) -> None:
    result = call(None, name, arguments)
    assert not result.ok and expected in result.content


def test_terminal_keeps_state_and_reports_exit_codes(box: Sandbox) -> None:
    streamed: list[str] = []
    first = call(box, "terminal", {"command": "cd /tmp && export X=42 && echo hi"}, streamed)
    assert first.ok and first.exit_code == 0 and "hi" in first.content and "cwd /tmp" in first.content
    assert "hi" in "".join(streamed)  # streamed while it ran
    second = call(box, "terminal", {"command": "echo $X; false"})
    assert not second.ok and second.exit_code == 1 and "42" in second.content


def test_terminal_timeout_interrupts_only_the_command(box: Sandbox) -> None:
    slow = call(box, "terminal", {"command": "sleep 30", "timeout": 1})
    assert not slow.ok and slow.exit_code == 124 and "timed out after 1 s" in slow.content
    assert call(box, "terminal", {"command": "echo alive"}).content.startswith("alive")


def test_background_process_lifecycle(box: Sandbox) -> None:
    started = call(
        box, "terminal", {"command": "for i in 1 2 3; do echo tick$i; sleep 0.2; done", "background": True}
    )
    proc_id = started.content.split()[3]
    waited = call(box, "process", {"action": "wait", "id": proc_id, "timeout": 20})
    assert "exited with code 0" in waited.content
    log = call(box, "process", {"action": "log", "id": proc_id})
    assert "tick1" in log.content and "tick3" in log.content
    assert proc_id in call(box, "process", {"action": "list"}).content
    missing = call(box, "process", {"action": "poll"})
    assert not missing.ok and "needs the process id" in missing.content


def test_file_tools_round_trip(box: Sandbox) -> None:
    assert call(box, "write_file", {"path": "pkg/app.py", "content": "print('one')\nprint('two')\n"}).ok
    read = call(box, "read_file", {"path": "pkg/app.py"})
    assert "     1\tprint('one')" in read.content and "[lines 1-2 of 2]" in read.content
    patched = call(box, "patch", {"path": "pkg/app.py", "old": "'two'", "new": "'2'"})
    assert patched.ok and "+print('2')" in patched.content
    missing = call(box, "patch", {"path": "pkg/app.py", "old": "print('three')", "new": "x"})
    assert not missing.ok and "not in pkg/app.py" in missing.content and "closest lines" in missing.content
    found = call(box, "search_files", {"pattern": "print\\('2'\\)", "path": "pkg"})
    assert "app.py:2:" in found.content
    listing = call(box, "list_files", {"path": "."})
    assert "pkg/" in listing.content and "app.py" in listing.content
    gone = call(box, "read_file", {"path": "nope.txt"})
    assert not gone.ok and "nope.txt does not exist" in gone.content


def test_redaction_cuts_known_values_and_key_shapes() -> None:
    redact = Redactor(["my-model-key-123"])
    text = (
        "key my-model-key-123 / OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123 / "
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789 / AKIAIOSFODNN7EXAMPLE / password: hunter2hunter2\n"
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"
    )
    cleaned = redact(text)
    for secret in ("my-model-key-123", "sk-proj-abc", "ghp_abc", "AKIAIOSFODNN7EXAMPLE", "hunter2", "b3Blbn"):
        assert secret not in cleaned
    assert "OPENAI_API_KEY=[REDACTED]" in cleaned and "[REDACTED:github-token]" in cleaned
    assert redact("nothing secret here: ls -la /workspace") == "nothing secret here: ls -la /workspace"


def test_clip_keeps_head_and_tail() -> None:
    text = "".join(f"line {i}\n" for i in range(10_000))
    clipped = clip(text, 1000)
    assert len(clipped) < 1200 and clipped.startswith("line 0\n") and clipped.endswith("line 9999\n")
    assert "characters cut" in clipped and clip("short", 1000) == "short"


def test_parallel_safe_neighbours_are_grouped() -> None:
    tools = TOOLS.select(["terminal", "files"])
    names = ["read_file", "search_files", "terminal", "read_file", "list_files", "write_file", "unknown"]
    calls = [ToolCall(id=str(i), name=name, arguments="{}") for i, name in enumerate(names)]
    assert [[c.name for c in group] for group in groups(calls, tools)] == [
        ["read_file", "search_files"],
        ["terminal"],
        ["read_file", "list_files"],
        ["write_file"],
        ["unknown"],
    ]


def test_history_repair_answers_every_tool_call() -> None:
    def assistant(*ids: str) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "terminal", "arguments": "{}"}}
                for i in ids
            ],
        }

    history = [
        {"role": "user", "content": "go"},
        assistant("a", "b"),
        {"role": "tool", "tool_call_id": "a", "name": "terminal", "content": "ok"},
        {"role": "user", "content": "again"},
        assistant("c"),
    ]
    repaired = _repair(history)
    assert [(m["role"], m.get("tool_call_id")) for m in repaired] == [
        ("user", None),
        ("assistant", None),
        ("tool", "a"),
        ("tool", "b"),
        ("user", None),
        ("assistant", None),
        ("tool", "c"),
    ]
    assert _repair(repaired) == repaired
