"""The terminal and process tools drive an interactive terminal: open a REPL, type keys, read screens."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_runs import call as agent_call
from agent_runs import run, settings_for, tool_messages
from conftest import get_backend
from tool_calls import call

from backends import Sandbox, SandboxSpec
from control_plane.agent.agent import Agent


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    with get_backend("local").create(SandboxSpec(memory="512m", pids=256)) as sandbox:
        yield sandbox


def test_the_agent_opens_a_repl_types_keys_and_reads_the_screen(box: Sandbox) -> None:
    opened = call(box, "terminal", {"command": "python3 -q", "interactive": True})
    assert opened.ok and opened.content.startswith("[terminal t"), opened.content
    tid = opened.content.split()[1]
    assert ">>>" in opened.content and f'process(action="send", id="{tid}"' in opened.content
    typed = call(box, "process", {"action": "send", "id": tid, "keys": ["6*7", "Enter"], "expect": "^42$"})
    assert typed.ok and typed.content.splitlines()[-2:] == ["42", ">>>"], typed.content
    resized = call(box, "process", {"action": "resize", "id": tid, "rows": 10, "cols": 40})
    assert "10x40" in resized.content.splitlines()[0]
    assert tid in call(box, "process", {"action": "list"}).content
    code = call(box, "process", {"action": "send", "id": tid, "keys": ["import sys; sys.exit(3)", "Enter"]})
    ended = call(box, "process", {"action": "wait", "id": tid, "timeout": 20})
    assert not ended.ok and ended.exit_code == 3 and "exited with code 3" in ended.content, (code, ended)
    assert "closed" in call(box, "process", {"action": "kill", "id": tid}).content


def test_misused_terminal_actions_are_readable_errors(box: Sandbox) -> None:
    background = call(box, "terminal", {"command": "sleep 30", "background": True})
    pid = background.content.split()[3]
    wrong = call(box, "process", {"action": "send", "id": pid, "keys": ["x"]})
    assert not wrong.ok and "send is for interactive terminals" in wrong.content
    missing = call(box, "process", {"action": "send", "id": "t999", "keys": ["x"]})
    assert not missing.ok and "no terminal 't999'" in missing.content
    tid = call(box, "terminal", {"command": "cat", "interactive": True, "timeout": 0.5}).content.split()[1]
    assert "resize needs" in call(box, "process", {"action": "resize", "id": tid}).content
    assert "send needs" in call(box, "process", {"action": "send", "id": tid}).content
    call(box, "process", {"action": "kill", "id": tid})
    call(box, "process", {"action": "kill", "id": pid})


def test_a_background_command_returns_once_the_path_it_builds_appears(box: Sandbox) -> None:
    box.run("rm -rf dist")
    built = call(
        box,
        "terminal",
        {"command": "sleep 0.3; mkdir dist; echo x > dist/app.js", "background": True, "wait_for": "dist"},
    )
    assert built.ok and built.content.startswith("started background process p"), built.content
    assert "[changed under dist:\ncreate /" in built.content and "/dist/" in built.content


def test_process_wait_for_returns_at_the_first_change_or_says_none_came(box: Sandbox) -> None:
    box.run("mkdir -p out")
    call(box, "terminal", {"command": "sleep 0.3; echo done > out/result", "background": True})
    changed = call(box, "process", {"action": "wait", "wait_for": "out", "timeout": 20})
    assert changed.ok and "/out/result" in changed.content, changed.content
    quiet = call(box, "process", {"action": "wait", "wait_for": "out", "timeout": 0.3})
    assert not quiet.ok and "no change under out within 0.3 s" in quiet.content
    plain = call(box, "terminal", {"command": "true", "wait_for": "out"})
    assert not plain.ok and "wait_for needs background=true or interactive=true" in plain.content
    missing = call(box, "process", {"action": "wait", "wait_for": "no/such/dir", "timeout": 1})
    assert not missing.ok and "cannot watch no/such/dir" in missing.content


def test_the_scripted_agent_drives_a_repl_and_hears_of_an_oom_kill(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(
        [
            {"tool_calls": [agent_call("terminal", command="python3 -q", interactive=True)]},
            {
                "tool_calls": [
                    agent_call("process", action="send", id="t1", keys=["6*7", "Enter"], expect="^42$")
                ]
            },
            {"tool_calls": [agent_call("process", action="send", id="t1", keys=["Ctrl-D"])]},
            {"tool_calls": [agent_call("terminal", command="python3 -c 'x = bytearray(400_000_000)'")]},
            {"text": "It printed 42; the big allocation was killed."},
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend="local", sandbox={"memory": "256m"}))
    conversation = agent.new_conversation(title="repl")
    try:
        end, events = run(conversation, "compute 6*7 in a python REPL, then try a big allocation")
        seen = tool_messages(fake_llm.requests[-1])
        assert end.reason == "done" and seen[0].startswith("[terminal t1 · 24x80 · running")
        assert seen[1].splitlines()[-2:] == ["42", ">>>"], seen[1]
        assert "exited with code 0" in seen[2]
        if agent.sandboxes.get(conversation.id).cgroup_dirs():  # a host where the local backend has cgroups
            assert "[sandbox limit: out of memory" in seen[3]
            notices = [e.message for e in events if e.type == "notice"]  # type: ignore[attr-defined]
            assert any(n.startswith("sandbox limit: out of memory") for n in notices), notices
        else:  # no cgroup (rlimits only): no count of OOM kills to report
            assert "sandbox limit" not in seen[3]
    finally:
        conversation.close()
        agent.close()
