"""The served API as the tests call it: the app on a free port, auth headers, its SSE events (events_of,
from sse_events.py, is here too for the tests that read both)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import get_backend
from served_app import scripted_profiles, serve_app
from sse_events import events_of

from control_plane.api.app import create_app
from control_plane.store.tokens import TokenStore


@pytest.fixture
def api(tmp_path: Path, fake_llm: Any) -> Iterator[tuple[str, dict[str, str]]]:
    """A served API for profiles alpha and beta; yields its URL and a token per profile."""
    get_backend("local")
    settings_for = scripted_profiles(tmp_path, fake_llm.url)
    tokens = TokenStore(tmp_path)
    issued = {name: tokens.create(name) for name in ("alpha", "beta")}
    with serve_app(create_app(tmp_path, settings_for)) as url:
        yield url, issued


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def sse_events(client: httpx.Client, url: str, token: str) -> list[dict[str, Any]]:
    """Read an SSE stream to its end: each event's name, id and JSON data."""
    with client.stream("GET", url, headers=auth(token), timeout=60) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith(
            "text/event-stream"
        )
        return list(events_of(response))


def served_turn(client: httpx.Client, token: str, fake_llm: Any) -> list[dict[str, Any]]:
    """Run one turn ("hi", answered "Hello!") in a new session of the served app; its events to the end."""
    fake_llm.load([{"text": "Hello!"}])
    session = client.post("/sessions", json={}).json()["id"]
    posted = client.post(f"/sessions/{session}/messages", json={"content": "hi"})
    assert posted.status_code == 202, posted.text
    after = posted.json()["after"]
    return sse_events(client, f"/sessions/{session}/events?after={after}&until_turn_end=true", token)
