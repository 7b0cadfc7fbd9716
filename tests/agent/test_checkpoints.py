"""The agent's checkpoints end to end: the scripted model writes, the sandbox is checkpointed before
writing calls (once per turn, none when nothing changed), a rollback restores deleted and edited files
and the agent is told, a forked session gets a copy of the history and of the sandbox."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from agent_runs import call, run, settings_for, tool_messages

from backends import SandboxSpec
from backends.docker import DockerSandbox
from control_plane.agent.agent import Agent
from control_plane.checkpoints import NoSuchCheckpoint
from control_plane.sandbox_manager import SandboxManager

BACKENDS = ["local", "docker"]


@pytest.fixture(params=BACKENDS)
def agent_on(request: pytest.FixtureRequest, tmp_path: Path, fake_llm: Any) -> Any:
    agents: list[Agent] = []

    def make(**overrides: Any) -> Agent:
        agent = Agent(settings_for(tmp_path, fake_llm.url, backend=request.param, **overrides))
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        for snapshot in agent.sandboxes.snapshots.list():
            agent.sandboxes.backend.delete_snapshot(snapshot.id)
        agent.close()


def test_checkpoints_are_taken_once_per_turn_and_rollback_restores_files(
    agent_on: Any, fake_llm: Any
) -> None:
    fake_llm.load(
        [
            {"tool_calls": [call("write_file", path="notes.txt", content="first\n")]},
            {"tool_calls": [call("write_file", path="keep.txt", content="keep\n")]},
            {"text": "Written."},
            {"tool_calls": [call("terminal", command="rm keep.txt && echo edited > notes.txt && ls")]},
            {"text": "Changed."},
            {"tool_calls": [call("read_file", path="notes.txt")]},
            {"text": "Read."},
            {"tool_calls": [call("terminal", command="cat keep.txt notes.txt")]},
            {"text": "Back."},
        ]
    )
    agent = agent_on()
    conversation = agent.new_conversation()
    run(conversation, "write two files")  # one checkpoint (of the empty workspace), not two
    assert [c.meta["n"] for c in agent.checkpoints.list(conversation.id)] == ["1"]
    run(conversation, "change them")  # checkpoint 2 holds both files
    run(conversation, "read")  # read_file writes nothing: no checkpoint
    checkpoints = agent.checkpoints.list(conversation.id)
    assert [(c.meta["n"], c.meta["tool"]) for c in checkpoints] == [("1", "write_file"), ("2", "terminal")]

    agent.checkpoints.rollback(conversation.id, 2)
    run(conversation, "look again")
    result = tool_messages(fake_llm.requests[-1])[-1]
    assert "keep\nfirst\n" in result  # the deleted file is back, the edited one as it was
    assert "rolled back to checkpoint 2" in result  # and the agent was told
    with pytest.raises(NoSuchCheckpoint, match="has no checkpoint 7 .it has: 1, 2"):
        agent.checkpoints.rollback(conversation.id, 7)


def test_nothing_changed_means_no_new_checkpoint(agent_on: Any, fake_llm: Any) -> None:
    fake_llm.load(
        [
            {"tool_calls": [call("terminal", command="echo hi")]},
            {"text": "one"},
            {"tool_calls": [call("terminal", command="echo again")]},
            {"text": "two"},
        ]
    )
    agent = agent_on()
    conversation = agent.new_conversation()
    run(conversation, "a")
    run(conversation, "b")
    assert [c.meta["n"] for c in agent.checkpoints.list(conversation.id)] == ["1"]


@pytest.mark.parametrize("checkpoints", [True, False])
def test_a_docker_session_keeps_a_copy_helper_ready_for_its_next_checkpoint(
    tmp_path: Path, fake_llm: Any, checkpoints: bool
) -> None:
    """With checkpoints on, a session's sandbox gets a copy helper made ahead, and its first checkpoint
    is copied by it (the checkpoint's id is the one the helper was made for); off, none is made."""
    fake_llm.load([{"tool_calls": [call("terminal", command="echo x > a.txt")]}, {"text": "ok"}])
    agent = Agent(
        settings_for(tmp_path, fake_llm.url, backend="docker", snapshots={"checkpoints": checkpoints})
    )
    try:
        conversation = agent.new_conversation()
        sandbox = agent.sandboxes.get(conversation.id)
        assert isinstance(sandbox, DockerSandbox)
        ahead = sandbox.helper_ahead()
        assert (ahead is not None) == checkpoints
        run(conversation, "a")
        assert [c.id for c in agent.checkpoints.list(conversation.id)] == ([ahead] if checkpoints else [])
        assert (sandbox.helper_ahead() not in (None, ahead)) == checkpoints  # made after the turn
    finally:
        for snapshot in agent.sandboxes.snapshots.list():
            agent.sandboxes.backend.delete_snapshot(snapshot.id)
        agent.close()


def test_terminal_checkpoints_can_be_turned_off(agent_on: Any, fake_llm: Any) -> None:
    fake_llm.load([{"tool_calls": [call("terminal", command="echo x > a.txt")]}, {"text": "ok"}])
    agent = agent_on(snapshots={"checkpoint_terminal": False})
    conversation = agent.new_conversation()
    run(conversation, "a")
    assert agent.checkpoints.list(conversation.id) == []


def test_a_rollback_in_another_process_applies_when_the_session_next_needs_its_sandbox(
    agent_on: Any, fake_llm: Any
) -> None:
    fake_llm.load(
        [
            {"tool_calls": [call("write_file", path="a.txt", content="v1\n")]},
            {"text": "one"},
            {"tool_calls": [call("write_file", path="a.txt", content="v2\n")]},
            {"text": "two"},
            {"tool_calls": [call("read_file", path="a.txt")]},
            {"text": "three"},
        ]
    )
    first = agent_on()
    conversation = first.new_conversation()
    run(conversation, "v1")
    run(conversation, "v2")
    conversation.close()  # the process ends: its sandbox goes, the checkpoints stay
    later = agent_on()  # another control plane on the same profile
    later.checkpoints.rollback(conversation.id, 2)
    resumed = later.resume(conversation.id)
    run(resumed, "read it")
    result = tool_messages(fake_llm.requests[-1])[-1]
    assert "v1" in result and "v2" not in result and "rolled back to checkpoint 2" in result


def test_a_forked_session_has_the_history_and_a_copy_of_the_sandbox(agent_on: Any, fake_llm: Any) -> None:
    fake_llm.load(
        [
            {"tool_calls": [call("write_file", path="plan.txt", content="shared\n")]},
            {"text": "planned"},
            {"tool_calls": [call("terminal", command="echo fork-side >> plan.txt; cat plan.txt")]},
            {"text": "fork done"},
            {"tool_calls": [call("terminal", command="cat plan.txt")]},
            {"text": "original done"},
        ]
    )
    agent = agent_on()
    original = agent.new_conversation(title="approach")
    run(original, "plan")
    fork = agent.fork_session(original.id)
    assert fork.id != original.id and fork.history == original.history
    run(fork, "try it one way")
    assert tool_messages(fake_llm.requests[-1])[-1].startswith("[notice: this session was forked")
    run(original, "check")
    assert "shared\n" in tool_messages(fake_llm.requests[-1])[-1]
    assert "fork-side" not in tool_messages(fake_llm.requests[-1])[-1]


@pytest.mark.parametrize("reap", [True, False])
def test_the_reaper_applies_the_profiles_retention_when_the_profile_says_so(
    tmp_path: Path, fake_llm: Any, reap: bool
) -> None:
    settings = settings_for(tmp_path, fake_llm.url, backend="local", snapshots={"keep": 2, "reap": reap})
    first = SandboxManager(settings)
    with first.backend.create(SandboxSpec()) as sb:
        taken = [sb.snapshot(owner="s-one") for _ in range(3)]
    data = first.snapshots.root / "data"
    crashed = data / "snap-aaaaaaaaaaaa.partial"  # a control plane died while copying this one
    crashed.mkdir()
    os.utime(crashed, (time.time() - 7200, time.time() - 7200))
    in_flight = data / "snap-bbbbbbbbbbbb.partial"
    in_flight.mkdir()
    later = SandboxManager(settings)  # the next control plane on this profile
    _ = later.backend
    kept = [s.id for s in later.snapshots.list()]
    try:
        if reap:
            assert kept == [taken[1].id, taken[2].id] and not Path(taken[0].location["path"]).exists()
            assert not crashed.exists() and in_flight.exists()
        else:
            assert kept == [s.id for s in taken] and crashed.exists()
    finally:
        for snapshot_id in kept:
            later.backend.delete_snapshot(snapshot_id)


def test_a_rollback_to_a_checkpoint_deleted_since_starts_fresh_and_says_so(
    agent_on: Any, fake_llm: Any
) -> None:
    fake_llm.load(
        [
            {"tool_calls": [call("write_file", path="a.txt", content="v1\n")]},
            {"text": "one"},
            {"tool_calls": [call("terminal", command="ls")]},
            {"text": "two"},
        ]
    )
    agent = agent_on()
    conversation = agent.new_conversation()
    run(conversation, "v1")
    conversation.close()
    agent.checkpoints.rollback(conversation.id, 1)
    agent.sandboxes.backend.delete_snapshot(agent.checkpoints.get(conversation.id, 1).id)
    resumed = agent.resume(conversation.id)
    run(resumed, "list")
    result = tool_messages(fake_llm.requests[-1])[-1]
    assert "could not be restored as asked" in result and "no snapshot" in result
    assert "a.txt" not in result.split("]", 1)[1]  # a fresh workspace
