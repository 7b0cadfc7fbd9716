"""The HTTP API over real HTTP (uvicorn on a free port): auth, profiles, sessions, SSE events."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from api_client import auth, sse_events
from served_app import scripted_profiles
from sse_events import events_of

from control_plane.api.app import create_app
from control_plane.config.settings import load_settings
from control_plane.store import Store
from control_plane.store.bindings import Bindings


def test_a_running_turn_is_read_as_the_history_before_it_and_its_events_from_the_start(
    api: tuple[str, dict[str, str]], fake_llm: Any
) -> None:
    """A page opened mid-turn renders the turn from its events, all of them: they may be ahead of what
    is stored (the history leaves the running turn out, `after` names where its events begin)."""
    url, tokens = api
    fake_llm.load(
        [
            {"text": "the first turn"},
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo done"}}]},
            {"text": "the second turn", "delay": 300},
        ]
    )
    with httpx.Client(base_url=url, headers=auth(tokens["alpha"])) as client:
        session = client.post("/sessions", json={}).json()["id"]
        first = client.post(f"/sessions/{session}/messages", json={"content": "one"}).json()
        sse_events(
            client, f"/sessions/{session}/events?after={first['after']}&until_turn_end=true", tokens["alpha"]
        )
        second = client.post(f"/sessions/{session}/messages", json={"content": "two"}).json()
        fake_llm.wait_requests(3)  # the turn is past its tool call, waiting for the model
        detail = client.get(f"/sessions/{session}").json()
        assert detail["running"] and detail["after"] == second["after"]
        assert [m["content"] for m in detail["messages"] if m["role"] == "user"] == ["one"]
        names = []
        with client.stream(
            "GET", f"/sessions/{session}/events?after={detail['after']}", timeout=60
        ) as events:
            for event in events_of(events):  # the turn goes on: read up to its tool's end
                names.append(event["event"])
                if event["event"] == "tool_end":
                    break
        assert names[0] == "user_message" and "tool_start" in names
        assert client.post(f"/sessions/{session}/interrupt").json() == {"interrupted": True}


def test_session_flow_over_sse(api: tuple[str, dict[str, str]], fake_llm: Any) -> None:
    url, tokens = api
    fake_llm.load(
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo from-the-sandbox"}}]},
            {"text": "The sandbox said hello."},
        ]
    )
    with httpx.Client(base_url=url) as client:
        created = client.post("/sessions", json={"title": "api test"}, headers=auth(tokens["alpha"]))
        assert created.status_code == 201
        session = created.json()["id"]
        posted = client.post(
            f"/sessions/{session}/messages", json={"content": "say hi"}, headers=auth(tokens["alpha"])
        )
        assert posted.status_code == 202 and posted.json()["status"] == "started"
        after = posted.json()["after"]
        events = sse_events(
            client, f"/sessions/{session}/events?after={after}&until_turn_end=true", tokens["alpha"]
        )
        names = [e["event"] for e in events if e["event"] not in ("text_delta", "usage", "tool_progress")]
        assert names == [
            "user_message",
            "assistant_message",
            "tool_start",
            "tool_end",
            "assistant_message",
            "turn_end",
        ]
        assert [e["id"] for e in events] == sorted(e["id"] for e in events)
        tool_end = next(e["data"] for e in events if e["event"] == "tool_end")
        assert tool_end["ok"] and "from-the-sandbox" in tool_end["result"]
        assert events[-1]["data"]["reason"] == "done" and events[-1]["data"]["session_id"] == session

        # reconnecting with Last-Event-ID replays only what came after it
        replay = client.get(
            f"/sessions/{session}/events?until_turn_end=true",
            headers={**auth(tokens["alpha"]), "Last-Event-ID": str(events[-2]["id"])},
        )
        assert replay.text.count("event: turn_end") == 1 and "event: tool_start" not in replay.text

        detail = client.get(f"/sessions/{session}", headers=auth(tokens["alpha"])).json()
        assert [m["role"] for m in detail["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
        assert not detail["running"]
        listed = client.get("/sessions", headers=auth(tokens["alpha"])).json()
        assert [s["id"] for s in listed] == [session]
        hits = client.get(
            "/sessions/search", params={"q": "from-the-sandbox"}, headers=auth(tokens["alpha"])
        ).json()
        assert hits and hits[0]["session_id"] == session
        assert hits[0]["first"][0]["role"] == "user" and hits[0]["message_id"] in [
            m["id"] for m in hits[0]["window"]
        ]
        for mode in ("keyword", "hybrid"):
            found = client.get(
                "/sessions/search",
                params={"q": "from-the-sandbox", "mode": mode},
                headers=auth(tokens["alpha"]),
            ).json()
            assert [f["session_id"] for f in found] == [session]
        bad_mode = client.get(
            "/sessions/search", params={"q": "x", "mode": "fuzzy"}, headers=auth(tokens["alpha"])
        )
        assert bad_mode.status_code == 422
        assert client.post(f"/sessions/{session}/close", headers=auth(tokens["alpha"])).json() == {
            "closed": True
        }


def test_auth_and_profile_isolation(api: tuple[str, dict[str, str]], fake_llm: Any) -> None:
    url, tokens = api
    with httpx.Client(base_url=url) as client:
        assert client.get("/health").json()["status"] == "ok"
        assert client.get("/sessions").status_code == 401
        denied = client.get("/sessions", headers=auth("hmt_not-a-token"))
        assert denied.status_code == 401 and denied.headers["www-authenticate"] == "Bearer"
        mine = client.post("/sessions", headers=auth(tokens["alpha"])).json()["id"]
        for method, path in [
            ("GET", f"/sessions/{mine}"),
            ("POST", f"/sessions/{mine}/interrupt"),
            ("GET", f"/sessions/{mine}/events"),
        ]:
            assert client.request(method, path, headers=auth(tokens["beta"])).status_code == 404, path
        posted = client.post(
            f"/sessions/{mine}/messages", json={"content": "hi"}, headers=auth(tokens["beta"])
        )
        assert posted.status_code == 404
        assert client.get("/sessions", headers=auth(tokens["beta"])).json() == []
        bad = client.post(f"/sessions/{mine}/messages", json={"content": ""}, headers=auth(tokens["alpha"]))
        assert bad.status_code == 422
        spec = client.get("/openapi.json").json()
        assert "/sessions/{session_id}/events" in spec["paths"] and spec["info"]["title"] == "Hermetic"


def test_a_second_message_steers_the_running_one(api: tuple[str, dict[str, str]], fake_llm: Any) -> None:
    url, tokens = api
    fake_llm.load(
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "sleep 2"}}]},
            {"text": "done, and noted"},
        ]
    )
    with httpx.Client(base_url=url, headers=auth(tokens["alpha"])) as client:
        session = client.post("/sessions").json()["id"]
        first = client.post(f"/sessions/{session}/messages", json={"content": "wait"}).json()
        second = client.post(f"/sessions/{session}/messages", json={"content": "also note this"}).json()
        assert first["status"] == "started" and second["status"] == "steered"
        events = sse_events(
            client, f"/sessions/{session}/events?after={first['after']}&until_turn_end=true", tokens["alpha"]
        )
        steers = [e["data"] for e in events if e["event"] == "user_message" and e["data"]["steer"]]
        assert [s["content"] for s in steers] == ["also note this"]
        assert fake_llm.requests[-1]["messages"][-1]["content"] == "also note this"


def test_a_message_posted_again_under_its_idempotency_key_runs_once(
    api: tuple[str, dict[str, str]], fake_llm: Any, tmp_path: Path
) -> None:
    url, tokens = api
    fake_llm.load([{"text": "answered"}, {"text": "answered elsewhere"}, {"text": "answered at last"}])
    with httpx.Client(base_url=url, headers=auth(tokens["alpha"])) as client:
        session = client.post("/sessions").json()["id"]
        other = client.post("/sessions").json()["id"]

        def post(to: str, key: str, content: str = "hi") -> dict[str, Any]:
            sent = client.post(
                f"/sessions/{to}/messages", json={"content": content}, headers={"Idempotency-Key": key}
            )
            assert sent.status_code == 202, sent.text
            return dict(sent.json())

        def answer(to: str, posted: dict[str, Any]) -> str:
            url = f"/sessions/{to}/events?after={posted['after']}&until_turn_end=true"
            return str(sse_events(client, url, tokens["alpha"])[-1]["data"]["content"])

        first = post(session, "k-1")
        assert first["status"] == "started" and answer(session, first) == "answered"
        assert post(session, "k-1")["status"] == "duplicate"  # as a client unsure of the first would send it
        elsewhere = post(other, "k-1")
        assert elsewhere["status"] == "started"  # a key is one session's
        assert answer(other, elsewhere) == "answered elsewhere"

        # a key bound by a post whose replica died before it saved the message holds nothing back
        with Store(str(load_settings("alpha", root=tmp_path).database_url)) as store:
            Bindings(store.engine, "alpha").claim("message", f"{session}:k-lost", session, keep=10)
        lost = post(session, "k-lost", "hi again")
        assert lost["status"] == "started" and answer(session, lost) == "answered at last"

        long_key = client.post(
            f"/sessions/{session}/messages", json={"content": "hi"}, headers={"Idempotency-Key": "k" * 65}
        )
        assert long_key.status_code == 422
    detail = httpx.get(f"{url}/sessions/{session}", headers=auth(tokens["alpha"])).json()
    assert [m["content"] for m in detail["messages"] if m["role"] == "user"] == ["hi", "hi again"]
    assert len(fake_llm.requests) == 3


def test_out_of_bounds_input_is_a_clear_422_and_errors_are_documented(
    api: tuple[str, dict[str, str]],
) -> None:
    url, tokens = api
    with httpx.Client(base_url=url, headers=auth(tokens["alpha"])) as client:
        for path, params in [
            ("/sessions", {"offset": "1" + "0" * 29}),
            ("/sessions/search", {"q": "deploy\x00"}),
            ("/sessions/search", {"q": "x" * 1001}),
        ]:
            response = client.get(path, params=params)
            assert response.status_code == 422, (path, params, response.text)
        assert client.post("/sessions", json={"title": "a\x00b"}).status_code == 422
        assert client.get("/sessions/search", params={"q": '"unbalanced NEAR( *'}).json() == []
        document = client.get("/openapi.json").json()
    get_session = document["paths"]["/sessions/{session_id}"]["get"]["responses"]
    assert {"200", "401", "404", "422"} <= set(get_session)
    assert get_session["404"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorBody"
    }


def test_conformance_405_lists_every_method_missing_taps_and_skills_are_404_health_is_public(
    api: tuple[str, dict[str, str]],
) -> None:
    url, tokens = api
    with httpx.Client(base_url=url, headers=auth(tokens["alpha"])) as client:
        document = client.get("/openapi.json").json()
        for path in ("/sessions", "/cron/jobs", "/skills/taps", "/snapshots/s-1"):
            refused = client.request("PUT", path)
            template = "/snapshots/{snapshot_id}" if path.startswith("/snapshots/") else path
            documented = {method.upper() for method in document["paths"][template]}
            assert refused.status_code == 405
            assert documented <= set(refused.headers["allow"].split(", ")), (path, refused.headers)
        for method, path in [
            ("DELETE", "/skills/taps/nosuch"),
            ("POST", "/skills/no-such-skill/uninstall"),
            ("POST", "/skills/no-such-skill/unmerge"),
            ("POST", "/skills/no-such-skill/update"),
        ]:
            missing = client.request(method, path, json={} if path.endswith("update") else None)
            assert missing.status_code == 404, (path, missing.text)
            assert "no-such-skill" in missing.json()["detail"] or "nosuch" in missing.json()["detail"]
    assert document["paths"]["/health"]["get"]["security"] == []
    assert httpx.get(f"{url}/health").json()["status"] == "ok"


def test_requests_opening_a_profile_at_once_share_one(tmp_path: Path) -> None:
    """The first requests of a profile arrive together (a console's page load): one agent and store,
    not one per request with the others left open."""
    app = create_app(tmp_path, scripted_profiles(tmp_path, "http://127.0.0.1:9"))
    hub = app.state.hub
    start = threading.Barrier(6)

    def open_it() -> Any:
        start.wait()
        return hub.profile("alpha")

    with ThreadPoolExecutor(6) as pool:
        opened = list(pool.map(lambda _: open_it(), range(6)))
    try:
        assert all(p is opened[0] for p in opened) and list(hub.profiles) == ["alpha"]
    finally:
        hub.close()
