"""execute_code end to end: the scripted model writes a script, a real sandbox (local, docker) runs it,
its tool calls come back over the runtime's channel and go through the agent's one path (events, audit
rows, budget), and what the model reads next is the script's output and a log of its calls."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from agent_runs import call, run, settings_for, tool_messages

from control_plane.agent.agent import Agent
from control_plane.config.settings import Limits
from control_plane.models.fake_llm import FakeLLM
from control_plane.tools import TOOLS, ToolContext, invoke


def script(code: str, **arguments: Any) -> dict[str, Any]:
    return call("execute_code", code=textwrap.dedent(code), **arguments)


def agent_for(tmp_path: Path, fake_llm: FakeLLM, backend: str, **overrides: Any) -> Agent:
    return Agent(settings_for(tmp_path, fake_llm.url, backend, **overrides))


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_script_calls_tools_through_the_agents_one_path(
    tmp_path: Path, fake_llm: FakeLLM, backend: str
) -> None:
    fake_llm.load(
        [
            {
                "tool_calls": [
                    script(
                        """
                        from hermetic_tools import terminal, write_file, read_file
                        for n in range(3):
                            r = terminal(f"echo item-{n} && exit {n}")
                            print(n, r.ok, r.exit_code)
                        write_file(path="notes.txt", content="from the script\\n")
                        print("read:", "from the script" in read_file("notes.txt"))
                        """
                    )
                ]
            },
            {"text": "done"},
        ]
    )
    agent = agent_for(tmp_path, fake_llm, backend)
    conversation = agent.new_conversation()
    end, events = run(conversation, "go")
    assert end.reason == "done"
    seen = tool_messages(fake_llm.requests[-1])[-1]
    assert "0 True 0\n1 False 1\n2 False 2\nread: True\n" in seen
    assert "[the script exited with code 0; 5 tool calls: terminal x3, write_file x1, read_file x1]" in seen
    assert 'terminal {"command": "echo item-1 && exit 1"} -> failed, exit 1' in seen
    # each inner call was an ordinary tool call for the event stream and the audit log
    starts = [e for e in events if e.type == "tool_start"]
    assert [e.name for e in starts] == [
        "execute_code",
        "terminal",
        "terminal",
        "terminal",
        "write_file",
        "read_file",
    ]
    outer = starts[0].call_id
    assert all(e.call_id.startswith(outer + ".") for e in starts[1:])
    rows = agent.store.tool_calls(conversation.id)
    assert sorted(r.tool for r in rows) == sorted(e.name for e in starts)
    conversation.close()


def test_clarify_and_delegate_are_refused_with_the_reason(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.load(
        [
            {
                "tool_calls": [
                    script(
                        """
                        import hermetic_tools as t
                        for name in ("clarify", "delegate", "execute_code"):
                            try:
                                t.call(name, question="?")
                            except t.ToolRefused as exc:
                                print("refused:", exc)
                        try:
                            t.no_such_tool()
                        except AttributeError as exc:
                            print("missing:", exc)
                        """
                    )
                ]
            },
            {"text": "ok"},
        ]
    )
    conversation = agent_for(tmp_path, fake_llm, "local").new_conversation()
    run(conversation, "go")
    seen = tool_messages(fake_llm.requests[-1])[-1]
    assert "refused: clarify cannot be called from a script: it waits for the user's answer" in seen
    assert "refused: delegate cannot be called from a script: child agents need model steps" in seen
    assert "refused: execute_code cannot be called from a script" in seen
    assert "missing: hermetic_tools has no tool 'no_such_tool'" in seen
    assert "clarify {" in seen and "-> refused" in seen
    conversation.close()


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_script_that_loops_forever_is_killed_at_its_timeout(
    tmp_path: Path, fake_llm: FakeLLM, backend: str
) -> None:
    fake_llm.load(
        [
            {"tool_calls": [script("print('started', flush=True)\nwhile True:\n    pass\n", timeout=1.5)]},
            {"tool_calls": [call("terminal", command="echo still here")]},
            {"text": "ok"},
        ]
    )
    conversation = agent_for(tmp_path, fake_llm, backend).new_conversation()
    end, events = run(conversation, "go")
    assert end.reason == "done"
    killed, after = tool_messages(fake_llm.requests[-1])[-2:]
    assert (
        "started\n" in killed and "[the script was killed after its timeout of 1.5 s; 0 tool calls]" in killed
    )
    assert "still here" in after  # the sandbox and the agent go on
    conversation.close()


def test_a_script_calling_ten_thousand_tools_stops_at_the_turns_budget(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.load(
        [
            {
                "tool_calls": [
                    script(
                        """
                        from hermetic_tools import todo, BudgetSpent
                        done = 0
                        try:
                            for i in range(10000):
                                todo(todos=[{"id": "a", "content": f"step {i}", "status": "pending"}])
                                done += 1
                        except BudgetSpent as exc:
                            print("stopped after", done, "calls:", exc)
                        """
                    )
                ]
            },
            {"tool_calls": [call("todo", todos=[])]},
            {"text": "ok"},
        ]
    )
    agent = agent_for(tmp_path, fake_llm, "local", limits={"max_tool_calls": 200})
    conversation = agent.new_conversation()
    end, _ = run(conversation, "go")
    assert end.reason == "done"
    seen, after = tool_messages(fake_llm.requests[-1])[-2:]
    # execute_code itself is the first of the 200; 199 inner calls ran, the 200th was refused
    assert "stopped after 199 calls: error: not run: this turn's budget of 200 tool calls is spent" in seen
    assert "201 tool calls: todo x201" not in seen and "200 tool calls: todo x200" in seen
    assert "... 160 more calls ..." in seen and "-> not run: budget spent" in seen
    assert "budget of 200 tool calls is spent" in after  # the model's own next call is refused too
    conversation.close()


def test_output_is_capped_and_an_interrupt_kills_the_script(tmp_path: Path, fake_llm: FakeLLM) -> None:
    waits = "from hermetic_tools import terminal\nterminal('echo ready')\nimport time\ntime.sleep(120)\n"
    fake_llm.load(
        [
            {"tool_calls": [script("import sys\nsys.stdout.write('x' * 2_000_000)\nprint('END')\n")]},
            {"tool_calls": [script(waits)]},
        ]
    )
    agent = agent_for(tmp_path, fake_llm, "local", limits={"tool_output": 8000})
    conversation = agent.new_conversation()
    events: list[Any] = []

    def emit(event: Any) -> None:
        events.append(event)
        if event.type == "tool_end" and event.name == "terminal":  # the script is running: stop it
            conversation.interrupt()

    end = asyncio.run(conversation.run("go", emit))
    assert end.reason == "interrupted"
    capped, stopped = [e.result for e in events if e.type == "tool_end" and e.name == "execute_code"]
    assert len(capped) <= 8000 and "output truncated: 2,000,004 bytes in all" in capped and "END" in capped
    assert "the script was stopped: the user interrupted; 1 tool calls: terminal x1" in stopped
    conversation.close()


def test_execute_code_without_an_agent_loop_says_so() -> None:
    ctx = ToolContext(session_id="s", call_id="c", limits=Limits(), get_sandbox=_no_sandbox)
    result = invoke(TOOLS.get("execute_code"), "execute_code", '{"code": "print(1)"}', ctx)
    assert not result.ok and "not available here" in result.content


def _no_sandbox() -> Any:
    raise AssertionError("execute_code without call_tool must not make a sandbox")


def test_a_failing_script_shows_its_own_traceback(tmp_path: Path, fake_llm: FakeLLM) -> None:
    fake_llm.load([{"tool_calls": [script("print('before')\nraise ValueError('boom')\n")]}, {"text": "ok"}])
    conversation = agent_for(tmp_path, fake_llm, "local").new_conversation()
    run(conversation, "go")
    seen = tool_messages(fake_llm.requests[-1])[-1]
    assert "before\nTraceback (most recent call last):\n" in seen and "ValueError: boom" in seen
    assert 'script.py", line 2, in <module>' in seen and "<string>" not in seen  # not the host's frame
    assert "[the script exited with code 1; 0 tool calls]" in seen
    conversation.close()


def test_the_toolbox_benchmark_runs_with_tiny_counts(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.toolbox", "-n", "1", "--backends", "local", "--out", str(tmp_path)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    figures = json.loads(next(tmp_path.glob("*.json")).read_text())["figures"]
    assert set(figures) == {
        "hermetic local: 20 terminal calls, one per model step",
        "hermetic local: 20 terminal calls in one execute_code",
        "hermetic local: 20 terminal calls, one per model step (checkpoints off)",
        "hermetic local: 20 terminal calls in one execute_code (checkpoints off)",
        "hermetic local: python tool `1+1` round trip (warm kernel)",
        "control plane: web_extract of a 200 KB page",
    }
    assert "local: execute_code" in done.stdout and "faster than 20 separate calls" in done.stdout
    assert "local (checkpoints off): execute_code" in done.stdout
    assert "local: python tool `1+1`" in done.stdout and "web_extract of a 200 KB page" in done.stdout
