"""`hermetic run`, `chat`, `sessions`, `token` and `demo` as a user runs them: a subprocess, with the
model configured through HERMETIC_* variables pointing at the scripted model server."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend
from hermetic_cli import hermetic, scripted_env


@pytest.fixture
def env(tmp_path: Path, fake_llm: Any) -> dict[str, str]:
    get_backend("local")
    return scripted_env(tmp_path, fake_llm.url)


def test_run_streams_the_reply_and_the_tool_calls(env: dict[str, str], fake_llm: Any) -> None:
    fake_llm.load(
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo hello-from-the-sandbox"}}]},
            {"text": "All done: the sandbox said hello."},
        ]
    )
    done = hermetic("run", "say hello", env=env)
    assert done.returncode == 0, done.stderr
    assert "▸ terminal echo hello-from-the-sandbox" in done.stdout
    assert "All done: the sandbox said hello." in done.stdout and "done after 2 step(s)" in done.stdout
    session = done.stderr.split("session ")[-1].split()[0]
    assert fake_llm.requests[0]["stream"] is True

    listed = hermetic("sessions", "list", env=env)
    assert session in listed.stdout and "say hello" in listed.stdout
    shown = hermetic("sessions", "show", session, env=env)
    assert "All done" in shown.stdout and "hello-from-the-sandbox" in shown.stdout
    found = hermetic("sessions", "search", "hello-from-the-sandbox", env=env)
    assert found.returncode == 0 and session in found.stdout
    # no word of it anywhere: nothing found (hybrid, the default, also returns the nearest in meaning)
    assert hermetic("sessions", "search", "nothing-like-this", "--mode", "keyword", env=env).returncode == 1
    # another profile sees none of it
    other = hermetic("--profile", "other", "sessions", "list", env=env)
    assert other.returncode == 0 and session not in other.stdout


def test_run_prints_json_events_on_request(env: dict[str, str], fake_llm: Any) -> None:
    fake_llm.load([{"text": "plain answer"}])
    done = hermetic("run", "--json", "hi", env=env)
    assert done.returncode == 0, done.stderr
    kinds = [line.split('"type":"')[1].split('"')[0] for line in done.stdout.splitlines()]
    assert kinds[0] == "user_message" and "text_delta" in kinds and kinds[-1] == "turn_end"


def test_chat_resumes_a_session(env: dict[str, str], fake_llm: Any) -> None:
    fake_llm.load([{"text": "first reply"}])
    first = hermetic("chat", env=env, stdin="remember the word pelican\n")
    assert first.returncode == 0 and "first reply" in first.stdout, first.stderr
    session = first.stderr.split("--resume ")[-1].split()[0]

    fake_llm.load([{"text": "you said pelican"}])
    again = hermetic("chat", "--resume", session, env=env, stdin="what word?\n/exit\n")
    assert again.returncode == 0 and "you said pelican" in again.stdout, again.stderr
    assert f"resumed session {session}" in again.stderr
    contents = [m["content"] for m in fake_llm.requests[-1]["messages"]]
    assert "remember the word pelican" in contents and "first reply" in contents
    missing = hermetic("chat", "--resume", "s-nope", env=env, stdin="")
    assert missing.returncode == 2 and "no session s-nope" in missing.stderr


def test_without_a_model_the_cli_says_how_to_configure_one(env: dict[str, str]) -> None:
    bare = {k: v for k, v in env.items() if not k.startswith("HERMETIC_MODEL")}
    done = hermetic("run", "hi", env=bare)
    assert done.returncode == 2 and "HERMETIC_MODEL__NAME" in done.stderr and "Traceback" not in done.stderr


def test_tokens_are_created_listed_and_revoked(env: dict[str, str]) -> None:
    token = hermetic("--profile", "work", "token", "create", "--name", "ci", env=env).stdout.strip()
    assert token.startswith("hmt_")
    listed = hermetic("token", "list", env=env).stdout
    assert "work" in listed and "ci" in listed and token not in listed
    token_id = listed.split()[0]
    assert hermetic("token", "revoke", token_id, env=env).returncode == 0
    assert "work" not in hermetic("token", "list", env=env).stdout


@pytest.mark.parametrize("backend", ["docker", "local"])
def test_demo_replays_a_session_that_really_runs(tmp_path: Path, backend: str) -> None:
    get_backend(backend)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    done = hermetic(
        "demo", "--backend", backend, env={**clean, "HERMETIC_ROOT": str(tmp_path), "COLUMNS": "200"}
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "REPLAY" in done.stdout and f"replay finished on the {backend} backend" in done.stdout
    assert "TypeError: sequence item 0: expected str instance, int found" in done.stdout  # the real error
    assert "primes below 50: 2, 3, 5, 7" in done.stdout
    # the learning loop: the error-then-fix turn was reviewed and the lesson saved
    assert "learning: reviewing" in done.stdout and "join numbers with" in done.stdout
    assert "join numbers with" in (tmp_path / "profiles" / "demo" / "MEMORY.md").read_text()
