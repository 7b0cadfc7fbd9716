"""Batch runs over the HTTP API (uvicorn on a free port, the local backend, a model server that answers
each conversation by its own state): a run started from a list of prompts and one from a prompts file's
text, followed over SSE while it runs (the second prompt held until the test has seen the first), read
back; a batch's sandbox counted against the profile's limit; what the API refuses, and another profile's
runs unseen."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
from api_client import auth, events_of, sse_events
from conftest import get_backend
from per_conversation import PerConversation
from served_app import scripted_profiles, serve_app

from control_plane.api.app import create_app
from control_plane.models.fake_llm import Turn
from control_plane.store.tokens import TokenStore


class HeldModel(PerConversation):
    """PerConversation, but a conversation whose prompt says "hold" gets no answer until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def _next(self, body: dict[str, Any]) -> tuple[int, Turn | None]:
        if any(m["role"] == "user" and "hold" in str(m["content"]) for m in body["messages"]):
            assert self.release.wait(60), "the test never released the held prompt"
        return super()._next(body)


def test_a_batch_is_followed_as_it_runs_then_read_back(tmp_path: Path) -> None:
    get_backend("local")
    token, other = TokenStore(tmp_path).create("alpha"), TokenStore(tmp_path).create("beta")
    with HeldModel() as model:
        app = create_app(tmp_path, scripted_profiles(tmp_path, model.url, limits={"max_sandboxes": 1}))
        with serve_app(app) as url, httpx.Client(base_url=url, headers=auth(token)) as client:
            prompts = [{"id": "first", "prompt": "say one"}, {"prompt": "hold then say two", "category": "c"}]
            started = client.post("/batches", json={"prompts": prompts, "workers": 1})
            assert started.status_code == 202, started.text
            run = started.json()
            assert (run["state"], run["done"], run["total"]) == ("running", 0, 2)
            path = f"/batches/{run['id']}"
            assert [p["id"] for p in client.get(f"{path}/prompts").json()] == ["first", "line-2"]

            with client.stream("GET", f"{path}/events", timeout=60) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                stream = events_of(response)
                first = next(stream)
                assert (first["event"], first["id"], first["data"]["id"]) == ("result", 1, "first")
                assert first["data"]["status"] == "completed" and first["data"]["tool_calls"] == 1
                assert "ran one" in first["data"]["final"]
                midway = client.get(path).json()  # the second prompt is held: the run is half done
                assert (midway["state"], midway["done"], midway["statuses"]) == (
                    "running",
                    1,
                    {"completed": 1},
                )
                again = client.post("/batches", json={"prompts": prompts})
                assert again.status_code == 429 and again.headers["Retry-After"]
                model.release.set()
                rest = list(stream)
            assert [(e["event"], e.get("id")) for e in rest] == [("result", 2), ("end", 3)]
            assert (rest[0]["data"]["id"], rest[0]["data"]["category"]) == ("line-2", "c")
            assert rest[1]["data"]["statuses"] == {"completed": 2} and rest[1]["data"]["total"] == 2

            done = client.get(path).json()
            assert (done["state"], done["done"], done["summary"]["tool_calls"]) == ("finished", 2, 2)
            session = client.get(f"/sessions/{first['data']['session_id']}")
            assert session.status_code == 200 and session.json()["session"]["source"] == "batch"
            replay = sse_events(client, f"{url}{path}/events", token)
            assert [(e["event"], e.get("id")) for e in replay] == [("result", 1), ("result", 2), ("end", 3)]

            model.tool_first = False  # no sandbox needed from here on
            from_file = client.post(
                "/batches", json={"prompts_file": '"say three"\n\n{"prompt": "say four"}\n', "workers": 1}
            )
            assert from_file.status_code == 202, from_file.text
            ended = sse_events(client, f"{url}/batches/{from_file.json()['id']}/events", token)
            assert sorted(e["data"]["id"] for e in ended if e["event"] == "result") == ["line-1", "line-3"]
            assert [r["id"] for r in client.get("/batches").json()] == [from_file.json()["id"], run["id"]]

            profile = app.state.hub.profile("alpha")  # a session holds the profile's only sandbox
            holder = profile.agent.new_conversation(title="holds the sandbox", source="api")
            profile.agent.sandboxes.get(holder.id)
            model.tool_first = True
            limited = client.post("/batches", json={"prompts": [{"prompt": "say five"}], "workers": 1})
            [result] = [
                e
                for e in sse_events(client, f"{url}/batches/{limited.json()['id']}/events", token)
                if e["event"] == "result"
            ]
            detail = client.get(f"/sessions/{result['data']['session_id']}").json()  # its tool was refused
            assert "limits.max_sandboxes" in json.dumps(detail["messages"]), detail["messages"]
            profile.agent.sandboxes.release(holder.id)

            for refused, problem in (
                ({"prompts_file": '{"prompt": "ok"}\n{"prompt": \n'}, "prompts_file:2: not JSON"),
                ({"prompts": [{"prompt": "x", "toolsets": ["warp"]}]}, "unknown toolset(s) warp"),
                ({"prompts": [{"id": "a", "prompt": "x"}, {"id": "a", "prompt": "y"}]}, "used twice"),
                ({"prompts_file": "\n\n"}, "no prompts"),
                ({"prompts_file": '"\\u0000"'}, "prompts_file:1"),
                ({"prompts": prompts, "workers": 64}, "at most 1 (limits.max_sandboxes)"),
            ):
                answer = client.post("/batches", json=refused)
                assert answer.status_code == 400 and problem in answer.json()["detail"], answer.text
            for malformed in (
                {},
                {"prompts": [], "workers": 1},
                {"prompts": prompts, "prompts_file": "x"},
                {"prompts": [{"prompt": ""}]},
                {"prompts": prompts, "workers": 0},
                {"prompts": [{"prompt": "x", "extra": 1}]},
            ):
                assert client.post("/batches", json=malformed).status_code == 422, malformed
            assert client.post(
                "/batches", content=b"{", headers={"Content-Type": "application/json"}
            ).status_code in (
                400,
                422,
            )

            assert httpx.get(f"{url}/batches").status_code == 401
            assert httpx.post(f"{url}/batches", json={"prompts": prompts}).status_code == 401
            assert httpx.get(f"{url}{path}", headers=auth("wrong-token")).status_code == 401
            for route in (path, f"{path}/prompts", f"{path}/events", "/batches/0123456789ab"):
                assert httpx.get(url + route, headers=auth(other)).status_code == 404, route
            assert httpx.get(f"{url}/batches", headers=auth(other)).json() == []
            assert client.get("/batches/not-an-id").status_code == 422
        app.state.hub.close()

        restarted = create_app(tmp_path, scripted_profiles(tmp_path, model.url))  # the runs are on disk
        with serve_app(restarted) as url, httpx.Client(base_url=url, headers=auth(token)) as client:
            assert client.get(path).json()["state"] == "finished"
            replay = sse_events(client, f"{url}{path}/events", token)
            assert [(e["event"], e.get("id")) for e in replay] == [
                ("result", 1),
                ("result", 2),
                ("end", None),
            ]
            assert replay[-1]["data"]["statuses"] == {"completed": 2}
        restarted.state.hub.close()
