"""Per-profile limits in the API (running sessions, live sandboxes: 429 with Retry-After) and the idle
close of a session's sandbox, on the local backend with the scripted model."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_client import auth, sse_events
from conftest import get_backend
from served_app import scripted_profiles, serve_app

from control_plane.api.app import create_app
from control_plane.config.settings import load_settings
from control_plane.sandbox_manager import SandboxLimit, SandboxManager
from control_plane.store.tokens import TokenStore

Serve = Callable[..., tuple[httpx.Client, Any]]


@pytest.fixture
def serve(tmp_path: Path, fake_llm: Any) -> Iterator[Serve]:
    """serve(limits=..., sandbox=...) -> a client with alpha's token, and the app's profile alpha."""
    get_backend("local")
    servers = contextlib.ExitStack()

    def start(**overrides: Any) -> tuple[httpx.Client, Any]:
        token = TokenStore(tmp_path).create("alpha")
        app = create_app(tmp_path, scripted_profiles(tmp_path, fake_llm.url, **overrides))
        url = servers.enter_context(serve_app(app))
        client = servers.enter_context(httpx.Client(base_url=url, headers=auth(token)))
        return client, app.state.hub.profile("alpha")

    with servers:
        yield start


def new_session(client: httpx.Client) -> str:
    created = client.post("/sessions")
    assert created.status_code == 201
    return str(created.json()["id"])


def run_turn(client: httpx.Client, session: str, content: str) -> list[dict[str, Any]]:
    """Post a message and read its events to the turn's end."""
    posted = client.post(f"/sessions/{session}/messages", json={"content": content})
    assert posted.status_code == 202, posted.text
    token = client.headers["Authorization"].removeprefix("Bearer ")
    url = f"/sessions/{session}/events?after={posted.json()['after']}&until_turn_end=true"
    return sse_events(client, url, token)


def terminal(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


def test_a_run_over_max_running_sessions_is_429_with_retry_after(serve: Serve, fake_llm: Any) -> None:
    fake_llm.load([{"text": "slow", "delay": 60}, {"text": "second"}])
    client, _ = serve(limits={"max_running_sessions": 1})
    first, second = new_session(client), new_session(client)
    assert client.post(f"/sessions/{first}/messages", json={"content": "one"}).status_code == 202
    refused = client.post(f"/sessions/{second}/messages", json={"content": "two"})
    assert refused.status_code == 429
    assert refused.headers["retry-after"].isdigit()
    assert "limits.max_running_sessions" in refused.json()["detail"]
    steered = client.post(f"/sessions/{first}/messages", json={"content": "and more"})
    assert steered.json()["status"] == "steered"  # the running session itself is not refused
    assert client.post(f"/sessions/{first}/close").json() == {"closed": True}
    events = run_turn(client, second, "two")
    assert events[-1]["data"]["reason"] == "done"


def test_a_run_needing_a_sandbox_over_max_sandboxes_is_429(serve: Serve, fake_llm: Any) -> None:
    fake_llm.load([terminal("echo held"), {"text": "ok"}, terminal("echo mine"), {"text": "ok"}])
    client, profile = serve(limits={"max_sandboxes": 1}, sandbox={"idle_seconds": None})
    holder, other = new_session(client), new_session(client)
    run_turn(client, holder, "hold one")
    assert profile.agent.sandboxes.held() == {holder}
    refused = client.post(f"/sessions/{other}/messages", json={"content": "me too"})
    assert refused.status_code == 429 and refused.headers["retry-after"].isdigit()
    assert "limits.max_sandboxes" in refused.json()["detail"]
    client.post(f"/sessions/{holder}/close")
    events = run_turn(client, other, "me too")
    assert [e["data"]["result"] for e in events if e["event"] == "tool_end"][0].startswith("mine")


def test_the_manager_itself_refuses_a_sandbox_over_the_limit(tmp_path: Path) -> None:
    get_backend("local")
    manager = SandboxManager(load_settings(root=tmp_path, backend="local", limits={"max_sandboxes": 1}))
    try:
        manager.get("s-a")
        with pytest.raises(SandboxLimit, match="limits.max_sandboxes"):
            manager.get("s-b")
        manager.release("s-a")
        assert manager.get("s-b").run("echo ok")["output"].strip() == "ok"
    finally:
        manager.close_all()


def wait_until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_an_idle_sandbox_is_closed_and_the_next_use_says_so(
    serve: Serve, fake_llm: Any, tmp_path: Path
) -> None:
    fake_llm.load(
        [
            terminal("echo kept > note && sleep 2 && cat note"),  # longer than idle_seconds: still not idle
            {"text": "ok"},
            terminal("cat note || echo missing"),
            {"text": "ok"},
        ]
    )
    client, profile = serve(sandbox={"idle_seconds": 1, "root": str(tmp_path / "boxes")})
    session = new_session(client)
    first = [e["data"] for e in run_turn(client, session, "write") if e["event"] == "tool_end"][0]
    assert first["result"].startswith("kept") and "notice" not in first["result"]
    workspaces = list((tmp_path / "boxes").iterdir())
    assert workspaces  # under sandbox.root, not ~/.hermetic
    wait_until(lambda: profile.agent.sandboxes.held() == set())
    events = run_turn(client, session, "read")
    second = [e["data"] for e in events if e["event"] == "tool_end"][0]
    assert second["result"].startswith("[notice: the sandbox was closed after 1 s unused")
    assert "missing" in second["result"]
    assert any(e["event"] == "notice" and "closed after 1 s unused" in e["data"]["message"] for e in events)


def test_idle_sessions_past_max_live_sessions_are_let_go_and_resumed_on_use(
    serve: Serve, fake_llm: Any
) -> None:
    fake_llm.load([{"text": "noted"}, {"text": "teal"}, {"text": "done"}])
    client, profile = serve(limits={"max_live_sessions": 2})
    first = new_session(client)
    run_turn(client, first, "remember the word teal")
    followed = new_session(client)
    token = client.headers["Authorization"].removeprefix("Bearer ")
    stream: list[list[dict[str, Any]]] = []  # after=500: a number from before a restart means "from now"
    follower = threading.Thread(
        target=lambda: stream.append(
            sse_events(client, f"/sessions/{followed}/events?after=500&until_turn_end=true", token)
        )
    )
    follower.start()
    deadline = time.monotonic() + 120
    while profile.live[followed].followers == 0:  # the follower holds its session live from here on
        assert time.monotonic() < deadline, "the follower never attached"
        time.sleep(0.01)
    third, fourth = new_session(client), new_session(client)
    assert list(profile.live) == [followed, fourth]  # first, then third: idle, least recently used
    assert client.get(f"/sessions/{first}").status_code == 200
    run_turn(client, first, "which word?")  # resumed from the database, its history whole
    assert any("remember the word teal" in str(m["content"]) for m in fake_llm.requests[-1]["messages"])
    assert third not in profile.live and first in profile.live
    run_turn(client, followed, "end the follower's turn")
    follower.join(120)
    assert stream and stream[0][-1]["event"] == "turn_end"


def test_every_route_that_would_start_a_sandbox_over_max_sandboxes_is_429(serve: Serve) -> None:
    """Exposing a port starts the session's sandbox and a fork copies one: over the limit both are 429
    with Retry-After (the app's handler for SandboxLimit), and nothing is made; listing and closing
    exposures of a session without a sandbox start none."""
    client, profile = serve(limits={"max_sandboxes": 1}, sandbox={"idle_seconds": None})
    holder, other = new_session(client), new_session(client)
    profile.agent.sandboxes.get(holder)
    sessions = len(client.get("/sessions").json())
    for refused in (
        client.post(f"/sessions/{other}/exposures", json={"port": 8000}),
        client.post(f"/sessions/{holder}/fork"),
    ):
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"].isdigit()
        assert "limits.max_sandboxes" in refused.json()["detail"]
    assert client.get(f"/sessions/{other}/exposures").json() == []
    assert client.delete(f"/sessions/{other}/exposures/8000").status_code == 404
    assert profile.agent.sandboxes.held() == {holder}
    assert len(client.get("/sessions").json()) == sessions, "the refused fork left no session behind"
