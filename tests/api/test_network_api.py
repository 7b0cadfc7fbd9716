"""The API side of a request for a host: the approval is a `question` event, answered on an endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import get_backend
from network_kit import fetch_script
from served_app import scripted_profiles, serve_app

from control_plane.api.app import create_app
from control_plane.store.tokens import TokenStore


@pytest.fixture
def api(tmp_path: Path, fake_llm: Any) -> Iterator[tuple[str, str]]:
    get_backend("local")
    settings_for = scripted_profiles(
        tmp_path, fake_llm.url, sandbox={"network": "allowlist"}, toolsets=["terminal", "network"]
    )
    token = TokenStore(tmp_path).create("alpha")
    with serve_app(create_app(tmp_path, settings_for)) as url:
        yield url, token


def test_the_approval_is_an_event_answered_on_an_endpoint(
    api: tuple[str, str],
    fake_llm: Any,
    web: int,
) -> None:
    url, token = api
    headers = {"Authorization": f"Bearer {token}"}
    fake_llm.load(fetch_script(web))
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        session = client.post("/sessions", json={}).json()["id"]
        after = client.post(f"/sessions/{session}/messages", json={"content": "fetch"}).json()["after"]
        seen: list[dict[str, Any]] = []
        with client.stream("GET", f"/sessions/{session}/events?after={after}&until_turn_end=true") as events:
            name = ""
            for line in events.iter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                    seen.append({"event": name, **data})
                    if name == "question":
                        base = f"/sessions/{session}/questions"
                        assert (
                            client.post(f"{base}/{data['id']}", json={"answer": "maybe"}).status_code == 422
                        )
                        assert client.post(f"{base}/nope", json={"answer": "once"}).status_code == 404
                        assert client.post(f"{base}/{data['id']}", json={"answer": "once"}).json() == {
                            "answered": True
                        }
    question = next(e for e in seen if e["event"] == "question")
    assert question["kind"] == "approval" and question["choices"] == ["once", "always", "no"]
    assert question["detail"]["host"] == "127.0.0.1" and question["detail"]["port"] == str(web)
    answered = next(e for e in seen if e["event"] == "answered")
    assert answered["answer"] == "once" and answered["by"] == "user"
    results = [e["result"] for e in seen if e["event"] == "tool_end"]
    assert "egress refused" in results[0] and "hello from the host" in results[2]


def test_a_port_of_the_sessions_sandbox_is_exposed_listed_and_closed(
    api: tuple[str, str], fake_llm: Any
) -> None:
    url, token = api
    serve = "cd /tmp && echo api-exposed > index.html && exec python3 -m http.server 8000 --bind 127.0.0.1"
    wait = "for i in $(seq 200); do grep -qi ':1F40 .* 0A' /proc/net/tcp && break; sleep 0.05; done"
    fake_llm.load(
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": serve, "background": True}}]},
            {"tool_calls": [{"name": "terminal", "arguments": {"command": wait}}]},
            {"text": "serving"},
        ]
    )
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
        session = client.post("/sessions", json={}).json()["id"]
        after = client.post(f"/sessions/{session}/messages", json={"content": "serve"}).json()["after"]
        with client.stream("GET", f"/sessions/{session}/events?after={after}&until_turn_end=true") as events:
            for _ in events.iter_lines():
                pass
        assert client.post(f"/sessions/{session}/exposures", json={"port": 0}).status_code == 422
        exposed = client.post(f"/sessions/{session}/exposures", json={"port": 8000})
        assert exposed.status_code == 201, exposed.text
        body = exposed.json()
        assert body["host"] == "127.0.0.1" and body["port"] == 8000
        assert httpx.get(body["url"]).text == "api-exposed\n"
        assert client.get(f"/sessions/{session}/exposures").json() == [body]
        assert client.delete(f"/sessions/{session}/exposures/8000").json() == {"closed": True}
        assert client.delete(f"/sessions/{session}/exposures/8000").status_code == 404
        assert client.get(f"/sessions/{session}/exposures").json() == []
        with pytest.raises(httpx.TransportError):
            httpx.get(body["url"])
