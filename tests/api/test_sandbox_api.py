"""The API's sandbox routes: `GET /sessions/{id}/watch` (a session's sandbox files as they change, as
Server-Sent Events), `GET /sandboxes` and `GET /sandboxes/{id}/stats` (what each costs now)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import get_backend
from served_app import scripted_profiles, serve_app

from control_plane.api.app import create_app
from control_plane.store.tokens import TokenStore


@pytest.fixture
def api(tmp_path: Path, fake_llm: Any) -> Iterator[tuple[httpx.Client, Any]]:
    get_backend("local")
    settings_for = scripted_profiles(tmp_path, fake_llm.url, limits={"max_sandboxes": 1})
    token = TokenStore(tmp_path).create("alpha")
    app = create_app(tmp_path, settings_for)
    with (
        serve_app(app) as url,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client,
    ):
        client.timeout = 60
        yield client, app.state.hub.profile("alpha")


def test_changes_in_the_session_sandbox_stream_as_events(api: tuple[httpx.Client, Any]) -> None:
    client, profile = api
    session = client.post("/sessions", json={}).json()["id"]
    sandbox = profile.agent.sandboxes.get(session)
    sandbox.run("mkdir -p site")
    seen: list[tuple[str, dict[str, Any]]] = []
    with client.stream("GET", f"/sessions/{session}/watch", params={"path": "site"}) as stream:
        assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
        name = ""
        for line in stream.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                seen.append((name, json.loads(line[6:])))
                if name == "watching":  # armed: what happens from now on is seen
                    sandbox.run("mkdir site/css && echo 'a{}' > site/css/app.css")
                if name == "create" and seen[-1][1]["path"].endswith("/site/css/app.css"):
                    break
    watching = seen[0]
    assert watching[0] == "watching" and watching[1]["path"].endswith("/site")
    created = {data["path"].rsplit("/site/", 1)[1] for kind, data in seen if kind == "create"}
    assert created == {"css", "css/app.css"}
    assert next(data for kind, data in seen if kind == "create")["is_dir"] is True


def test_a_bad_watch_is_refused_with_a_status(api: tuple[httpx.Client, Any]) -> None:
    client, profile = api
    session = client.post("/sessions", json={}).json()["id"]
    missing = client.get(f"/sessions/{session}/watch", params={"path": "no/such/dir"})
    assert missing.status_code == 400 and "cannot watch no/such/dir" in missing.json()["detail"]
    assert client.get("/sessions/nope/watch", params={"path": "."}).status_code == 404
    assert client.get(f"/sessions/{session}/watch").status_code == 422
    anonymous = httpx.get(f"{client.base_url}/sessions/{session}/watch", params={"path": "."})
    assert anonymous.status_code == 401
    other = client.post("/sessions", json={}).json()["id"]  # the first holds the one sandbox allowed
    full = client.get(f"/sessions/{other}/watch", params={"path": "."})
    assert full.status_code == 429 and full.headers["Retry-After"] == "30"


def test_the_profile_sandboxes_and_their_stats_are_listed(api: tuple[httpx.Client, Any]) -> None:
    client, profile = api
    assert client.get("/sandboxes").json() == []
    session = client.post("/sessions", json={}).json()["id"]
    sandbox = profile.agent.sandboxes.get(session)
    sandbox.run("head -c 2000000 /dev/zero > blob")
    listed = client.get("/sandboxes").json()
    assert [(s["sandbox_id"], s["session_id"], s["backend"]) for s in listed] == [
        (sandbox.id, session, "local")
    ]
    stats = client.get(f"/sandboxes/{sandbox.id}/stats")
    assert stats.status_code == 200, stats.text
    body = stats.json()
    assert body["sandbox_id"] == sandbox.id and body["disk_bytes"] >= 2_000_000 and body["pids"] >= 1
    assert body["memory_bytes"] > 0 and body["cpu_seconds"] > 0
    assert client.get("/sandboxes/hm-nosuchone/stats").status_code == 404
    assert client.get("/sandboxes/bad%20id/stats").status_code == 422
