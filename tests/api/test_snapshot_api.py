"""Snapshots and checkpoints over the HTTP API (real uvicorn, the local backend): list, show, label,
delete, snapshot a session, its checkpoints, rollback (the agent is told), fork; other profiles see none."""

from __future__ import annotations

from typing import Any

import httpx
from agent_runs import call
from api_client import auth, sse_events


def turn(client: httpx.Client, session: str, token: str, text: str) -> list[dict[str, Any]]:
    posted = client.post(f"/sessions/{session}/messages", json={"content": text}, headers=auth(token))
    assert posted.status_code == 202, posted.text
    after = posted.json()["after"]
    return sse_events(client, f"/sessions/{session}/events?after={after}&until_turn_end=true", token)


def tool_results(events: list[dict[str, Any]]) -> list[str]:
    return [e["data"]["result"] for e in events if e["event"] == "tool_end"]


def test_snapshots_and_checkpoints_over_http(api: tuple[str, dict[str, str]], fake_llm: Any) -> None:
    url, tokens = api
    alpha, beta = auth(tokens["alpha"]), auth(tokens["beta"])
    fake_llm.load(
        [
            {"tool_calls": [call("write_file", path="report.txt", content="draft\n")]},
            {"text": "drafted"},
            {"tool_calls": [call("terminal", command="rm report.txt && echo gone")]},
            {"text": "removed"},
            {"tool_calls": [call("terminal", command="cat report.txt")]},
            {"text": "restored"},
        ]
    )
    with httpx.Client(base_url=url, timeout=60) as client:
        session = client.post("/sessions", json={"title": "snap"}, headers=alpha).json()["id"]
        turn(client, session, tokens["alpha"], "draft")
        turn(client, session, tokens["alpha"], "remove it")
        checkpoints = client.get(f"/sessions/{session}/checkpoints", headers=alpha).json()
        assert [(c["n"], c["meta"]["tool"]) for c in checkpoints] == [(1, "write_file"), (2, "terminal")]

        made = client.post(f"/sessions/{session}/snapshot", json={"label": "by hand"}, headers=alpha)
        assert made.status_code == 201 and made.json()["label"] == "by hand"
        snapshot_id = made.json()["id"]
        listed = client.get("/snapshots", headers=alpha).json()
        assert len(listed["snapshots"]) == 3 and listed["bytes"] == sum(
            s["bytes"] for s in listed["snapshots"]
        )
        assert client.get("/snapshots", headers=beta).json()["snapshots"] == []  # per profile
        assert client.get(f"/snapshots/{snapshot_id}", headers=beta).status_code == 404
        relabelled = client.patch(f"/snapshots/{snapshot_id}", json={"label": "kept"}, headers=alpha)
        assert relabelled.json()["label"] == "kept"
        assert client.get(f"/snapshots/{snapshot_id}", headers=alpha).json()["label"] == "kept"

        rolled = client.post(f"/sessions/{session}/rollback", json={"n": 2}, headers=alpha)
        assert rolled.status_code == 200 and rolled.json()["applied"] == "now"
        results = tool_results(turn(client, session, tokens["alpha"], "is it back?"))
        assert "rolled back to checkpoint 2" in results[0] and "]\ndraft\n" in results[0]

        forked = client.post(f"/sessions/{session}/fork", headers=alpha)
        assert forked.status_code == 201 and forked.json()["parent_id"] == session

        missing = client.post(f"/sessions/{session}/rollback", json={"n": 9}, headers=alpha)
        assert missing.status_code == 404 and "has no checkpoint 9" in missing.json()["detail"]
        assert client.post(f"/sessions/{session}/rollback", json={"n": 1}, headers=beta).status_code == 404
        assert client.post(f"/sessions/{session}/rollback", json={"n": 0}, headers=alpha).status_code == 422
        assert client.delete(f"/snapshots/{snapshot_id}", headers=alpha).json() == {"deleted": True}
        assert client.delete(f"/snapshots/{snapshot_id}", headers=alpha).status_code == 404
        bad = client.get("/snapshots/..%2Fetc", headers=alpha)
        assert bad.status_code == 404
        for left in client.get("/snapshots", headers=alpha).json()["snapshots"]:
            assert client.delete(f"/snapshots/{left['id']}", headers=alpha).status_code == 200
