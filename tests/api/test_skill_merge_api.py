"""Near-duplicate merges over the HTTP API (uvicorn on a free port, the local backend, the scripted model
as the reviewer): a merge the gate refuses changes nothing and the pair stays proposed; one it passes
replaces the pair; what the route refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from api_client import auth, sse_events
from conftest import get_backend
from served_app import scripted_profiles, serve_app
from skill_kit import BODY, FAILING, PASSING, add, merge_turns

from control_plane.api.app import create_app
from control_plane.store.tokens import TokenStore

PAIR = {"a": "check-answer", "b": "answer-check"}


def review(client: httpx.Client, url: str, token: str) -> str:
    """Start the merge review and follow its session to the turn's end; the skill_manage output."""
    started = client.post("/skills/curation/merge", json=PAIR)
    assert started.status_code == 202, started.text
    session = started.json()["session_id"]
    events = sse_events(client, f"{url}/sessions/{session}/events?after=0&until_turn_end=true", token)
    assert events[-1]["event"] == "turn_end" and events[-1]["data"]["content"] == "done reviewing"
    assert client.get(f"/sessions/{session}").json()["session"]["source"] == "review"
    [output] = [e["data"]["result"] for e in events if e["event"] == "tool_end"]
    return str(output)


def test_a_proposed_pair_is_merged_by_the_reviewer_through_the_gate(tmp_path: Path, fake_llm: Any) -> None:
    get_backend("local")
    token = TokenStore(tmp_path).create("alpha")
    app = create_app(tmp_path, scripted_profiles(tmp_path, fake_llm.url))
    library = app.state.hub.profile("alpha").agent.skills
    add(library, "answer-check", "Check that the answer is 42.", BODY)
    add(library, "check-answer", "Checks that the answer is 42.", BODY + " Then report it.")
    add(library, "disk-usage", "Report the largest directories.", "Run du -sh on each directory and sort.")
    with serve_app(app) as url, httpx.Client(base_url=url, headers=auth(token)) as client:
        fake_llm.load(merge_turns(FAILING))
        refused = review(client, url, token)
        assert "was NOT merged" in refused, refused
        assert [s["state"] for s in client.get("/skills").json()] == ["active"] * 3, "the gate refused it"
        pairs = client.get("/skills/curation/plan").json()["duplicates"]
        assert [(p["a"], p["b"]) for p in pairs] == [("answer-check", "check-answer")]

        fake_llm.load(merge_turns(PASSING))
        assert "merged as version 2" in review(client, url, token)
        gone = library.info("check-answer")
        assert (gone.state, gone.merged_into) == ("archived", "answer-check")
        assert library.info("answer-check").version == 2
        assert client.get("/skills/curation/plan").json()["duplicates"] == []

        again = client.post("/skills/curation/merge", json=PAIR)
        assert again.status_code == 409 and "not a near-duplicate pair" in again.json()["detail"]
        other = client.post("/skills/curation/merge", json={"a": "answer-check", "b": "disk-usage"})
        assert other.status_code == 409
        for malformed in ({"a": "Not A Name", "b": "x"}, {"a": "answer-check"}, {**PAIR, "c": "x"}):
            assert client.post("/skills/curation/merge", json=malformed).status_code == 422, malformed
        assert httpx.post(f"{url}/skills/curation/merge", json=PAIR).status_code == 401
    app.state.hub.close()
