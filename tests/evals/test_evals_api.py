"""Evaluation runs over the HTTP API (uvicorn on a free port): start a run of a suite in the profile's
home, follow it over SSE to its summary, read it back; what the API refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from api_client import auth, sse_events
from conftest import get_backend
from evals_kit import suite_in_home
from served_app import scripted_profiles, serve_app

from control_plane.api.app import create_app
from control_plane.store.tokens import TokenStore


def test_a_run_started_over_http_is_followed_to_its_summary(tmp_path: Path, fake_llm: Any) -> None:
    get_backend("docker")
    token = TokenStore(tmp_path).create("alpha")
    settings_for = scripted_profiles(tmp_path, fake_llm.url)
    suite_in_home(settings_for("alpha").home)
    with serve_app(create_app(tmp_path, settings_for)) as url, httpx.Client(base_url=url) as client:
        started = client.post("/evals", json={"suite": "mine", "attempts": 2}, headers=auth(token))
        assert started.status_code == 202, started.text
        run = started.json()
        assert (run["state"], run["total"], run["record"]["agent"]) == ("running", 4, "oracle")

        events = sse_events(client, f"{url}/evals/{run['id']}/events", token)
        attempts = [e for e in events if e["event"] == "attempt"]
        assert [e["id"] for e in attempts] == [1, 2, 3, 4]
        assert sorted((e["data"]["task"], e["data"]["reward"]) for e in attempts) == [
            ("fails", 0.0), ("fails", 0.0), ("passes", 1.0), ("passes", 1.0),
        ]  # fmt: skip
        end = events[-1]
        assert end["event"] == "end" and end["data"]["overall"]["pass_at_1"] == 0.5

        status = client.get(f"/evals/{run['id']}", headers=auth(token)).json()
        assert (status["state"], status["done"], status["summary"]["per_task"]["passes"]["passed"]) == (
            "finished", 4, 2,
        )  # fmt: skip
        results = client.get(f"/evals/{run['id']}/results", params={"after": 3}, headers=auth(token)).json()
        assert len(results) == 1
        listed = client.get("/evals", headers=auth(token)).json()
        assert [r["id"] for r in listed] == [run["id"]]
        replay = sse_events(client, f"{url}/evals/{run['id']}/events", token)
        assert [e["event"] for e in replay] == ["attempt"] * 4 + ["end"]  # a finished run replays

        for body, problem in (
            ({"suite": "nowhere"}, "no suite nowhere"),
            ({"suite": "mine", "workers": 64}, "at most 8 (limits.max_sandboxes)"),
        ):
            refused = client.post("/evals", json=body, headers=auth(token))
            assert refused.status_code == 400 and problem in refused.json()["detail"]
        assert client.post("/evals", json={"suite": "/etc"}, headers=auth(token)).status_code == 422
        assert client.get("/evals/0123456789ab", headers=auth(token)).status_code == 404
        assert client.get("/evals/0123456789ab/events", headers=auth(token)).status_code == 404
        assert client.get("/evals", headers=auth(TokenStore(tmp_path).create("beta"))).json() == []
