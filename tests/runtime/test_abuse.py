"""The runtime survives whatever a command does to itself (each test gets a fresh sandbox)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backends import Backend, Sandbox, SandboxSpec

FORK_BOMB = "python3 -c 'import os\nwhile True:\n  try: os.fork()\n  except OSError: pass'"


@pytest.fixture
def fresh(backend: Backend) -> Iterator[Sandbox]:
    with backend.create(SandboxSpec(memory="256m", pids=128)) as sb:
        yield sb


@pytest.mark.needs("limits")
def test_fork_bomb_is_contained_and_the_session_recovers(fresh: Sandbox) -> None:
    result = fresh.run(FORK_BOMB, timeout=3)
    assert result["timed_out"]
    assert fresh.run("echo survived")["output"] == "survived\n"
    assert fresh.call("sys.ping") == {"pong": True}


@pytest.mark.needs("limits")
def test_background_bash_fork_bomb_is_cleared_by_closing_the_session(fresh: Sandbox) -> None:
    fresh.run("bomb() { bomb | bomb & }; bomb", session="bomb", timeout=5)
    fresh.call("shell.close", {"session": "bomb"})
    assert fresh.run("echo survived", timeout=30)["output"] == "survived\n"


@pytest.mark.needs("limits")
def test_memory_hog_dies_and_the_runtime_does_not(fresh: Sandbox) -> None:
    result = fresh.run("python3 -c 'x = bytearray(1 << 30); print(len(x))'", timeout=60)
    assert result["exit_code"] != 0 and "1073741824" not in result["output"]
    assert fresh.run("echo survived")["output"] == "survived\n"


def test_100mb_of_output_is_cut_and_survived(fresh: Sandbox) -> None:
    result = fresh.run("head -c 100000000 /dev/zero | tr '\\0' a", timeout=120)
    assert result["truncated"] and "100,000,000 bytes in all" in result["output"]
    assert len(result["output"]) < 60_000
    assert fresh.run("echo survived")["output"] == "survived\n"


def test_binary_output_becomes_text(fresh: Sandbox) -> None:
    result = fresh.run("head -c 200000 /dev/urandom", timeout=60)
    assert result["exit_code"] == 0 and isinstance(result["output"], str)
    assert fresh.run("echo survived")["output"] == "survived\n"


def test_endless_silent_command_times_out(fresh: Sandbox) -> None:
    result = fresh.run("tail -f /dev/null", timeout=1)
    assert result["timed_out"] and fresh.run("echo ok")["output"] == "ok\n"
