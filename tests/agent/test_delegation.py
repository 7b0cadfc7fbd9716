"""The delegate tool end to end: real child Conversations over real litellm to the scripted model, each
child in a real sandbox of its own (local backend), real SQLite. Each agent's turns in the script carry
`match` (a text of its first user message), since parallel children ask the model in any order."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend

from control_plane.agent.agent import Agent
from control_plane.agent.loop import Conversation
from control_plane.config.settings import Settings, load_settings
from control_plane.events import ChildEnd, ChildStart, Event, TurnEnd

WAIT_FOR_GO = "for i in $(seq 600); do [ -e go ] && break; sleep 0.05; done; cat go 2>/dev/null || echo no-go"


def settings_for(root: Path, url: str, backend: str = "local", **overrides: Any) -> Settings:
    get_backend(backend)  # skips, with the reason, when this backend cannot run here
    model = {"name": "openai/scripted", "api_base": url, "api_key": "test-key-123456", "retries": 0}
    overrides.setdefault("learning", {"enabled": False})
    return load_settings(root=root, model=model, backend=backend, **overrides)


def turn(match: str, text: str | None = None, **tool: Any) -> dict[str, Any]:
    """One scripted reply for the agent whose first user message contains `match`."""
    reply: dict[str, Any] = {"match": match}
    if text is not None:
        reply["text"] = text
    if tool:
        name = tool.pop("name")
        reply["tool_calls"] = [{"name": name, "arguments": tool}]
    return reply


def run(conversation: Conversation, text: str, on_event: Any = None) -> tuple[TurnEnd, list[Event]]:
    events: list[Event] = []

    def emit(event: Event) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event)

    return asyncio.run(conversation.run(text, emit)), events


def requests_of(fake_llm: Any, match: str) -> list[dict[str, Any]]:
    def first_user(request: dict[str, Any]) -> str:
        return next(m["content"] for m in request["messages"] if m["role"] == "user")

    return [r for r in fake_llm.requests if match in first_user(r)]


def delegate_result(fake_llm: Any, match: str) -> dict[str, Any]:
    """The delegate call's result as the parent's model saw it."""
    last = requests_of(fake_llm, match)[-1]["messages"]
    return json.loads(next(m["content"] for m in reversed(last) if m["role"] == "tool"))


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_batch_of_three_runs_in_parallel_in_three_sandboxes(
    tmp_path: Path, fake_llm: Any, backend: str
) -> None:
    tasks = [{"goal": f"child-{name}: wait for the go file"} for name in "ABC"]
    script = [turn("PARENT", name="delegate", tasks=tasks)]
    for name in "ABC":  # each child waits until all three have started: only parallel children finish
        script += [turn(f"child-{name}", name="terminal", command=WAIT_FOR_GO)]
        script += [turn(f"child-{name}", f"{name} finished its part")]
    script += [turn("PARENT", "all three are done")]
    fake_llm.load(script)
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend=backend))
    parent = agent.new_conversation()
    started: list[str] = []

    def release_when_all_started(event: Event) -> None:
        if event.type == "tool_start" and event.delegate_call:
            started.append(event.session_id)
        if len(started) == 3 and event.type == "tool_start":
            for child in started:  # from another thread: the event loop must go on
                threading.Thread(target=_write_go, args=(agent, child)).start()

    end, events = run(parent, "PARENT: do three things at once", release_when_all_started)
    assert end.reason == "done" and end.content == "all three are done"

    result = delegate_result(fake_llm, "PARENT")
    assert result["done"] == 3 and [r["status"] for r in result["results"]] == ["done"] * 3
    assert [r["summary"] for r in result["results"]] == [f"{n} finished its part" for n in "ABC"]
    assert "go!" not in json.dumps(result)  # the children's tool output never reaches the parent
    children = [r["session_id"] for r in result["results"]]
    sandboxes = {agent.store.tool_calls(child)[0].sandbox_id for child in children}
    assert len(sandboxes) == 3 and None not in sandboxes
    for child in children:
        record = agent.store.get_session(child, "default")
        assert record is not None and record.source == "delegate" and record.parent_id == parent.id
        assert "go!" in agent.store.history(child)[-2]["content"]  # each saw its own go file

    starts = [e for e in events if isinstance(e, ChildStart)]
    assert [s.child_id for s in starts] == children and {s.sandbox for s in starts} == {"fresh"}
    call_id = next(e for e in events if e.type == "tool_start" and not e.delegate_call).call_id
    tagged = [e for e in events if e.session_id in children]
    assert tagged and all(e.delegate_call == call_id and e.depth == 1 for e in tagged)
    assert [e.type for e in events].count("turn_end") == 1  # the children's turn ends stay inside
    assert [e.status for e in events if isinstance(e, ChildEnd)] == ["done"] * 3
    agent.close()
    if backend == "docker":  # each child's container went with its session
        import docker

        client = docker.from_env()
        for child in children:
            assert client.containers.list(all=True, filters={"label": f"org.hermetic.session={child}"}) == []


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_child_forked_from_the_parents_sandbox_sees_its_files_and_shell_but_writes_only_its_own(
    tmp_path: Path, fake_llm: Any, backend: str
) -> None:
    child_command = (
        'pwd; echo "mark=$MARK"; cat ../plan.md; echo child > ../plan.md; echo mine > ../child.txt'
    )
    fake_llm.load(
        [
            turn("PARENT", name="write_file", path="plan.md", content="the parent's plan\n"),
            turn("PARENT", name="terminal", command="mkdir -p sub && cd sub && export MARK=from-parent"),
            turn("PARENT", name="delegate", tasks=[{"goal": "child-A: read the plan, write your own"}]),
            turn("child-A", name="terminal", command=child_command),
            turn("child-A", "read it and wrote mine"),
            turn("PARENT", "the child is done"),
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend=backend))
    parent = agent.new_conversation()
    end, events = run(parent, "PARENT: write a plan, then hand it on")
    assert end.reason == "done"
    [start] = [e for e in events if isinstance(e, ChildStart)]
    assert start.sandbox == "fork"
    assert (
        "a copy of the delegating agent's workspace"
        in requests_of(fake_llm, "child-A")[0]["messages"][-1]["content"]
    )
    seen = agent.store.history(start.child_id)[-2]["content"]
    assert "the parent's plan" in seen, "the fork has the parent's files"
    assert "/sub" in seen and "mark=from-parent" in seen, "and its shell: cwd and exported variables"
    assert (
        agent.store.tool_calls(start.child_id)[0].sandbox_id
        != agent.store.tool_calls(parent.id)[0].sandbox_id
    )
    workspace = agent.sandboxes.get(parent.id)
    assert workspace.call("fs.read", {"path": "plan.md"})["content"].endswith("\tthe parent's plan")
    assert "child.txt" not in json.dumps(workspace.call("fs.list", {"path": ".", "depth": 3})), (
        "the child's writes stay in its own sandbox"
    )
    agent.close()


def _write_go(agent: Agent, session_id: str) -> None:
    agent.sandboxes.get(session_id).call("fs.write", {"path": "go", "content": "go!\n"})


def test_files_come_back_only_when_asked(tmp_path: Path, fake_llm: Any) -> None:
    tasks = [
        {"goal": "child-A: write the report", "return": "files", "path": "out", "into": "from-a"},
        {"goal": "child-B: write a note"},
    ]
    fake_llm.load(
        [
            turn("PARENT", name="delegate", tasks=tasks),
            turn("child-A", name="write_file", path="out/report.txt", content="report of A\n"),
            turn("child-A", "report written"),
            turn("child-B", name="write_file", path="out/note-of-b.txt", content="note of B\n"),
            turn("child-B", "note written"),
            turn("PARENT", "got them"),
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url))
    parent = agent.new_conversation()
    end, events = run(parent, "PARENT: delegate two writes")
    assert end.reason == "done"
    a, b = delegate_result(fake_llm, "PARENT")["results"]
    assert a["status"] == b["status"] == "done"
    assert "copied into from-a" in a["files"] and "files" not in b
    workspace = agent.sandboxes.get(parent.id)
    assert workspace.call("fs.read", {"path": "from-a/report.txt"})["content"].endswith("report of A")
    found = workspace.call("fs.search", {"pattern": "note of B", "path": "."})
    assert found["matches"] == []
    listing = json.dumps(workspace.call("fs.list", {"path": ".", "depth": 5}))
    assert "note-of-b" not in listing and "from-a/report.txt" in listing and "from-a/from-a" not in listing
    agent.close()


def test_children_spend_the_parents_budget(tmp_path: Path, fake_llm: Any) -> None:
    forever = [turn("child-A", name="terminal", command="echo step")] * 10
    fake_llm.load(
        [turn("PARENT", name="delegate", tasks=[{"goal": "child-A: loop"}]), *forever, turn("PARENT", "x")]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url, limits={"max_iterations": 5}))
    end, events = run(agent.new_conversation(), "PARENT: delegate a long job")
    # the parent spent 1 call, so its child had 4; then the parent has nothing left for a second call
    assert len(requests_of(fake_llm, "child-A")) == 4
    assert len(requests_of(fake_llm, "PARENT")) == 1
    assert end.reason == "budget"
    (child_end,) = [e for e in events if isinstance(e, ChildEnd)]
    assert child_end.status == "out_of_budget" and child_end.iterations == 4
    agent.close()


def test_a_child_asks_no_more_than_its_own_budget(tmp_path: Path, fake_llm: Any) -> None:
    forever = [turn("child-A", name="terminal", command="echo step")] * 10
    tasks = [{"goal": "child-A: loop", "max_iterations": 2}]
    fake_llm.load([turn("PARENT", name="delegate", tasks=tasks), *forever, turn("PARENT", "it ran out")])
    agent = Agent(settings_for(tmp_path, fake_llm.url))
    end, _ = run(agent.new_conversation(), "PARENT: delegate")
    assert end.reason == "done" and len(requests_of(fake_llm, "child-A")) == 2
    (result,) = delegate_result(fake_llm, "PARENT")["results"]
    assert result["status"] == "out_of_budget"
    agent.close()


def tool_names(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools", [])}


def test_depth_limits_who_may_delegate(tmp_path: Path, fake_llm: Any) -> None:
    # default max_depth 2: the child has neither delegate nor clarify
    fake_llm.load(
        [
            turn("PARENT", name="delegate", tasks=[{"goal": "child-A: answer"}]),
            turn("child-A", "A answered"),
            turn("PARENT", "ok"),
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url))
    run(agent.new_conversation(), "PARENT: go")
    assert {"delegate", "clarify", "todo"} <= tool_names(requests_of(fake_llm, "PARENT")[0])
    child_tools = tool_names(requests_of(fake_llm, "child-A")[0])
    assert "delegate" not in child_tools and "clarify" not in child_tools and "todo" in child_tools
    system, brief = requests_of(fake_llm, "child-A")[0]["messages"][:2]  # focused, and a fresh history
    assert "You are a child agent" in system["content"] and "with delegate" not in system["content"]
    assert brief["content"].startswith("child-A: answer\n\nYour sandbox is new and empty")
    assert "PARENT" not in json.dumps(requests_of(fake_llm, "child-A")[0]["messages"])
    agent.close()

    # max_depth 3: the child may delegate, its child may not
    fake_llm.load(
        [
            turn("PARENT", name="delegate", tasks=[{"goal": "child-A: delegate further"}]),
            turn("child-A", name="delegate", tasks=[{"goal": "grandchild-G: answer"}]),
            turn("grandchild-G", "G answered"),
            turn("child-A", "A relayed: G answered"),
            turn("PARENT", "ok"),
        ]
    )
    agent = Agent(settings_for(tmp_path / "deeper", fake_llm.url, agent={"max_depth": 3}))
    parent = agent.new_conversation()
    end, events = run(parent, "PARENT: go deeper")
    assert end.reason == "done"
    assert "delegate" in tool_names(requests_of(fake_llm, "child-A")[0])
    assert "delegate" not in tool_names(requests_of(fake_llm, "grandchild-G")[0])
    (result,) = delegate_result(fake_llm, "PARENT")["results"]
    assert result["summary"] == "A relayed: G answered"
    grand_start = next(e for e in events if isinstance(e, ChildStart) and e.goal.startswith("grandchild"))
    assert grand_start.depth == 1 and grand_start.session_id == result["session_id"]
    grand = agent.store.get_session(grand_start.child_id, "default")
    assert grand is not None and grand.parent_id == result["session_id"]
    assert any(e.session_id == grand_start.child_id and e.depth == 2 for e in events)
    agent.close()


def test_more_tasks_than_max_children_are_refused(tmp_path: Path, fake_llm: Any) -> None:
    tasks = [{"goal": f"child-{n}"} for n in range(5)]
    fake_llm.load([turn("PARENT", name="delegate", tasks=tasks), turn("PARENT", "too many, I see")])
    agent = Agent(settings_for(tmp_path, fake_llm.url))
    end, _ = run(agent.new_conversation(), "PARENT: five at once")
    assert end.reason == "done"
    seen = requests_of(fake_llm, "PARENT")[-1]["messages"][-1]["content"]
    assert "at most 4 tasks per delegate call" in seen
    assert len(agent.store.list_sessions("default")) == 1  # no child was started
    agent.close()


def test_interrupt_reaches_the_children(tmp_path: Path, fake_llm: Any) -> None:
    tasks = [{"goal": f"child-{n}: sleep"} for n in "AB"]
    fake_llm.load(
        [
            turn("PARENT", name="delegate", tasks=tasks),
            turn("child-A", name="terminal", command="echo sleeping; sleep 60; echo woke"),
            turn("child-B", name="terminal", command="echo sleeping; sleep 60; echo woke"),
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url))
    parent = agent.new_conversation()
    sleeping: set[str] = set()

    def interrupt_when_both_sleep(event: Event) -> None:
        if event.type == "tool_progress" and event.delegate_call and "sleeping" in event.text:
            sleeping.add(event.session_id)
            if len(sleeping) == 2:  # both commands run: the interrupt must stop them
                threading.Thread(target=parent.interrupt).start()

    end, events = run(parent, "PARENT: sleep twice", interrupt_when_both_sleep)
    assert end.reason == "interrupted"
    assert [e.status for e in events if isinstance(e, ChildEnd)] == ["interrupted"] * 2
    ends = [e for e in events if e.type == "tool_end" and e.delegate_call]
    assert len(ends) == 2 and not any(e.ok or "woke" in e.result for e in ends)
    assert len(fake_llm.requests) == 3  # nobody asked the model again
    agent.close()


def test_a_failing_or_hanging_child_is_reported_and_the_parent_goes_on(tmp_path: Path, fake_llm: Any) -> None:
    tasks = [{"goal": f"child-{n}: work"} for n in "ABC"]
    fake_llm.load(
        [
            turn("PARENT", name="delegate", tasks=tasks),
            {"match": "child-A", "error": 500, "message": "the model broke"},
            {"match": "child-B", "text": "never in time", "delay": 120},
            turn("child-C", "C did its part"),
            turn("PARENT", "one of three worked; carrying on"),
        ]
    )
    # long enough for the quick children on a busy machine; the hung one waits for a reply in 120 s
    agent = Agent(settings_for(tmp_path, fake_llm.url, agent={"child_timeout": 10}))
    end, events = run(agent.new_conversation(), "PARENT: three jobs")
    assert end.reason == "done" and end.content == "one of three worked; carrying on"
    a, b, c = delegate_result(fake_llm, "PARENT")["results"]
    assert a["status"] == "failed" and "the model broke" in a["summary"]
    assert b["status"] == "failed" and "no result within 10 s" in b["summary"]
    assert c["status"] == "done" and c["summary"] == "C did its part"
    ends = {e.index: e.status for e in events if isinstance(e, ChildEnd)}  # in the order they finished
    assert ends == {1: "failed", 2: "failed", 3: "done"}
    agent.close()


def test_children_are_searchable_sessions_and_feed_the_learning_loop(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(
        [
            turn("PARENT", name="delegate", tasks=[{"goal": "child-A: find the word"}]),
            turn("child-A", name="terminal", command="echo zanzibar-quokka"),
            turn("child-A", "the word is zanzibar-quokka"),
            turn("PARENT", "found"),
            *[{"match": "Why this review", "text": "nothing to save"}] * 2,
        ]
    )
    learning = {"enabled": True, "busy_tools": 1, "nudge_every": 0}
    agent = Agent(settings_for(tmp_path, fake_llm.url, learning=learning))
    parent = agent.new_conversation()
    end, _ = run(parent, "PARENT: find it")
    assert end.reason == "done"
    agent.background.wait(60)
    (child,) = [s for s in agent.store.list_sessions("default") if s.source == "delegate"]
    hits = agent.store.recall("default", "zanzibar-quokka")
    assert child.id in {hit.session_id for hit in hits}
    reviews = [s for s in agent.store.list_sessions("default") if s.source == "review"]
    assert {r.parent_id for r in reviews} == {parent.id, child.id}  # the child's turn was reviewed too
    agent.close()


def test_bad_tasks_get_readable_errors_and_nothing_runs(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(
        [
            turn("PARENT", name="delegate", tasks=[{"goal": "child-A", "return": "files"}]),
            turn("PARENT", name="delegate", tasks=[]),
            turn("PARENT", name="delegate", tasks=[{"goal": "child-B: browse", "toolsets": ["browser"]}]),
            turn("PARENT", "understood"),
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url))
    end, _ = run(agent.new_conversation(), "PARENT: try")
    assert end.reason == "done"
    results = [m["content"] for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert "return=files needs `into`" in results[0]
    assert "tasks: List should have at least 1 item" in results[1]
    (refused,) = json.loads(results[2])["results"]
    assert refused["status"] == "failed" and "toolset(s) browser are not yours to give" in refused["summary"]
    assert len(agent.store.list_sessions("default")) == 1  # no child session was made
    agent.close()
