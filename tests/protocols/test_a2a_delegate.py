"""delegate_remote: one Hermetic profile (alpha) gives a task to another (beta) over A2A, both served by
`hermetic serve`'s app on loopback, the scripted model playing both agents' turns in order."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text
from a2a.types import GetTaskRequest, Task, TaskState
from api_client import auth, sse_events
from conftest import get_backend
from served_app import serve_app
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from control_plane.a2a import files
from control_plane.api.app import create_app
from control_plane.config.settings import Settings, load_settings
from control_plane.models.fake_llm import FakeLLM
from control_plane.store.tokens import TokenStore
from control_plane.tools import Interrupt
from control_plane.tools.a2a_client import RemoteAgentError, call_agent

TOKEN_ENV = "BETA_AGENT_TOKEN"
"""Where alpha's settings say beta's token is (the tool reads it when it calls)."""


@dataclass
class Pair:
    url: str
    alpha: str
    beta: str
    """Each profile's API token."""


@pytest.fixture
def pair(tmp_path: Path, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pair]:
    get_backend("local")
    served: dict[str, str] = {}
    model = {"name": "openai/scripted", "api_base": fake_llm.url, "api_key": "k-123456", "retries": 0}

    def settings_for(profile: str) -> Settings:  # called when a token of the profile is first used
        own: dict[str, Any] = {"toolsets": ["terminal", "clarify"]}
        if profile == "alpha":
            agents = [{"url": served["url"], "token_env": TOKEN_ENV, "description": "beta, with a sandbox"}]
            own = {"toolsets": ["remote"], "remote_agents": {"agents": agents, "timeout": 90}}
        return load_settings(
            profile, root=tmp_path, model=model, backend="local", learning={"enabled": False}, **own
        )

    tokens = TokenStore(tmp_path)
    alpha, beta = tokens.create("alpha"), tokens.create("beta")
    monkeypatch.setenv(TOKEN_ENV, beta)
    with serve_app(create_app(tmp_path, settings_for)) as url:
        served["url"] = url
        yield Pair(url, alpha, beta)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def turn(client: httpx.Client, token: str, session: str, text: str) -> list[dict[str, Any]]:
    """One message to a session over the API and its events until its turn ends."""
    posted = client.post(f"/sessions/{session}/messages", json={"content": text}, headers=auth(token))
    assert posted.status_code == 202, posted.text
    url = f"/sessions/{session}/events?after={posted.json()['after']}&until_turn_end=true"
    return sse_events(client, url, token)


def new_session(client: httpx.Client, token: str) -> str:
    created = client.post("/sessions", headers=auth(token))
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


def ends(events: list[dict[str, Any]], name: str = "delegate_remote") -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["event"] == "tool_end" and e["data"]["name"] == name]


def beta_session(client: httpx.Client, pair: Pair) -> dict[str, Any]:
    """Beta's one session (the A2A context alpha's call ran in), with its messages."""
    [record] = client.get("/sessions", headers=auth(pair.beta)).json()
    assert record["source"] == "a2a"
    detail: dict[str, Any] = client.get(f"/sessions/{record['id']}", headers=auth(pair.beta)).json()
    return detail


def remote_task(pair: Pair, result: str) -> Task:
    """Beta's A2A task that a delegate_remote result names, read with the SDK's client."""
    task_id = re.search(r"remote task (\S+) ", result).group(1)  # type: ignore[union-attr]

    async def get() -> Task:
        async with httpx.AsyncClient(headers=auth(pair.beta), timeout=60) as http:
            client = await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(pair.url)
            return await client.get_task(GetTaskRequest(id=task_id))

    return asyncio.run(asyncio.wait_for(get(), 60))


def test_alpha_gets_betas_answer_its_progress_and_its_files(
    pair: Pair, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_FILE", 1000)  # so that big.bin is over it
    command = "mkdir out; echo remote-$((6*7)) | tee out/answer.txt; head -c 2000 /dev/zero > big.bin"
    fake_llm.load(
        [
            call("delegate_remote", url=pair.url + "/", task="Print the answer in your sandbox"),
            call("terminal", command=command),  # beta's turn
            {"text": "Beta printed remote-42."},
            {"text": "Beta says remote-42."},  # alpha's again
        ]
    )
    with httpx.Client(base_url=pair.url, timeout=60) as client:
        session = new_session(client, pair.alpha)
        events = turn(client, pair.alpha, session, "Ask beta")
        beta = beta_session(client, pair)
        params = {"path": "remote/out/answer.txt"}
        saved = client.get(f"/sessions/{session}/files/download", params=params, headers=auth(pair.alpha))
    [end] = ends(events)
    assert end["ok"], end["result"]
    first, answer = end["result"].split("\n")[:2]
    assert re.fullmatch(rf"remote task \S+ \(context \S+\) at {pair.url}: completed", first)
    assert answer == "Beta printed remote-42."
    progress = "".join(e["data"]["text"] for e in events if e["event"] == "tool_progress")
    assert f"terminal {command}\n" in progress and "remote-42\n" in progress  # beta's status lines
    assert events[-1]["data"]["reason"] == "done"
    assert events[-1]["data"]["session_id"] != beta["session"]["id"]
    # beta really ran the command in its own session and sandbox, and alpha's model read beta's answer
    assert "remote-42" in fake_llm.requests[2]["messages"][-1]["content"]
    assert "Beta printed remote-42." in fake_llm.requests[3]["messages"][-1]["content"]
    assert "delegate_remote (by this exact URL" in fake_llm.requests[0]["messages"][0]["content"]
    assert f"{pair.url}: beta, with a sandbox" in fake_llm.requests[0]["messages"][0]["content"]
    roles = [(m["role"], m["content"]) for m in beta["messages"]]
    assert ("user", "Print the answer in your sandbox") in roles
    assert any(role == "tool" and "remote-42" in content for role, content in roles)
    task = remote_task(pair, end["result"])
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    # the file beta wrote came as an artifact with its bytes, and is in alpha's workspace now; the one over
    # the bound is named with where to download it
    artifacts = {artifact.artifact_id: artifact for artifact in task.artifacts}
    [part] = artifacts["file:out/answer.txt"].parts
    assert (part.raw, part.filename, part.media_type) == (b"remote-42\n", "out/answer.txt", "text/plain")
    over = get_artifact_text(artifacts["files"], "")
    assert over.startswith("big.bin: 2000 bytes, over the bounds")
    assert over.endswith(f"GET /sessions/{beta['session']['id']}/files/download?path=big.bin")
    assert "[files it sent, in your workspace]\nsaved: remote/out/answer.txt (10 bytes)" in end["result"]
    assert saved.status_code == 200 and saved.content == b"remote-42\n"


def test_betas_question_comes_back_and_alphas_next_call_answers_it(pair: Pair, fake_llm: FakeLLM) -> None:
    fake_llm.load(
        [
            call("delegate_remote", url=pair.url, task="Pick a colour"),
            call("clarify", question="Which one?", choices=["red", "blue"]),  # beta asks
            {"text": "Beta asks which one."},
        ]
    )
    with httpx.Client(base_url=pair.url, timeout=60) as client:
        session = new_session(client, pair.alpha)
        [asked] = ends(turn(client, pair.alpha, session, "Ask beta for a colour"))
        assert not asked["ok"]
        assert ": input_required\nWhich one? (answer one of: red, blue)\n" in asked["result"]
        found = re.search(r"task_id=(\S+), context_id=(\S+)$", asked["result"])
        assert found, asked["result"]
        task_id, context_id = found.groups()
        fake_llm.load(  # the ids are beta's: the rest of the script is written once they are known
            [
                call("delegate_remote", url=pair.url, task="red", task_id=task_id, context_id=context_id),
                {"text": "Red it is."},  # beta, with the answer
                {"text": "Beta picked red."},
            ]
        )
        [answered] = ends(turn(client, pair.alpha, session, "Tell it red"))
        beta = beta_session(client, pair)
    assert answered["ok"], answered["result"]
    first, answer = answered["result"].split("\n")[:2]
    assert first == f"remote task {task_id} (context {context_id}) at {pair.url}: completed"
    assert answer == "Red it is."
    assert fake_llm.requests[1]["messages"][-1]["content"] == "the user answered: red"
    assert not beta["running"] and len(fake_llm.requests) == 3


def test_refused_urls_and_tokens_are_clear_errors(
    pair: Pair, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    listener = socket.socket()  # an agent that is not on the list: it must never be connected to
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    elsewhere = f"http://127.0.0.1:{listener.getsockname()[1]}"
    fake_llm.load(
        [
            call("delegate_remote", url=elsewhere, task="hello"),
            {"text": "not allowed"},
            call("delegate_remote", url=pair.url, task="hello"),
            {"text": "bad token"},
            call("delegate_remote", url=pair.url, task="hello"),
            {"text": "no token"},
        ]
    )
    with httpx.Client(base_url=pair.url, timeout=60) as client:
        session = new_session(client, pair.alpha)
        refused = turn(client, pair.alpha, session, "Ask the other one")
        monkeypatch.setenv(TOKEN_ENV, "hmt_not-betas")
        bad = turn(client, pair.alpha, session, "Ask beta")
        monkeypatch.delenv(TOKEN_ENV)
        unset = turn(client, pair.alpha, session, "Ask beta again")
        assert client.get("/sessions", headers=auth(pair.beta)).json() == []  # beta never ran a task
    with pytest.raises(BlockingIOError):
        listener.accept()  # no connection was ever made to it
    listener.close()
    [end] = ends(refused)
    assert not end["ok"]
    assert end["result"] == (
        f"error: {elsewhere} is not an agent you may call: only those in the setting "
        f"remote_agents.agents (listed: {pair.url})"
    )
    [end] = ends(bad)
    assert not end["ok"] and end["result"].startswith(f"error: the call to {pair.url} failed: ")
    assert "401" in end["result"] and f"(is {TOKEN_ENV} the agent's token?)" in end["result"]
    [end] = ends(unset)
    assert end["result"] == (
        f"error: no token for {pair.url}: the environment variable {TOKEN_ENV} "
        "(remote_agents.agents[].token_env) is not set"
    )
    assert [e[-1]["data"]["reason"] for e in (refused, bad, unset)] == ["done"] * 3  # the agent went on
    assert len(fake_llm.requests) == 6


def test_a_card_pointing_elsewhere_gets_no_token(pair: Pair) -> None:
    """An allowlisted URL whose card names its JSON-RPC interface on another host: the client (the
    tool's and `hermetic a2a call`'s) sends nothing there, so the token stays with the agent named."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    card = httpx.get(f"{pair.url}/.well-known/agent-card.json", timeout=60).json()
    card["supportedInterfaces"][0]["url"] = f"http://127.0.0.1:{listener.getsockname()[1]}/a2a"
    app = Starlette(routes=[Route("/.well-known/agent-card.json", lambda request: JSONResponse(card))])
    with serve_app(app) as url, pytest.raises(RemoteAgentError, match="interfaces only elsewhere"):
        asyncio.run(asyncio.wait_for(call_agent(url, "hello", token=pair.beta), 60))
    with pytest.raises(BlockingIOError):
        listener.accept()
    listener.close()


def test_interrupting_alpha_cancels_betas_task_and_its_command(pair: Pair, fake_llm: FakeLLM) -> None:
    fake_llm.load(
        [
            call("delegate_remote", url=pair.url, task="Run the long one"),
            call("terminal", command="echo started; sleep 120"),  # beta's turn
            {"text": "never reached"},
        ]
    )
    events: list[dict[str, Any]] = []
    with httpx.Client(base_url=pair.url, timeout=60) as client:
        session = new_session(client, pair.alpha)
        go = {"content": "go"}
        posted = client.post(f"/sessions/{session}/messages", json=go, headers=auth(pair.alpha))
        url = f"/sessions/{session}/events?after={posted.json()['after']}&until_turn_end=true"
        with client.stream("GET", url, headers=auth(pair.alpha)) as stream:
            for line in stream.iter_lines():
                if line.startswith("data: ") and '"started\\n"' in line:  # beta's command is running
                    interrupted = client.post(f"/sessions/{session}/interrupt", headers=auth(pair.alpha))
                    assert interrupted.json() == {"interrupted": True}
                    break
        events = sse_events(client, f"/sessions/{session}/events?after=0&until_turn_end=true", pair.alpha)
        beta = beta_session(client, pair)
    [end] = ends(events)
    assert not end["ok"]
    assert "stopped: the user interrupted; the remote task was canceled" in end["result"]
    assert re.match(r"remote task \S+ \(context \S+\) at \S+: canceled\n", end["result"]), end["result"]
    assert events[-1]["data"]["reason"] == "interrupted"
    # beta's run is over (its cancel waited for it), long before the sleep would have ended: the command
    # was stopped, its shell freed; and no model call came after the cancel
    assert not beta["running"]
    [command] = [m["content"] for m in beta["messages"] if m["role"] == "tool"]
    assert command.startswith("started")
    assert remote_task(pair, end["result"]).status.state == TaskState.TASK_STATE_CANCELED
    assert len(fake_llm.requests) == 2


def test_an_interrupt_calls_back_once_and_at_once_when_already_set() -> None:
    flag, calls = Interrupt(), list[str]()
    flag.on_set(lambda: calls.append("waiting"))
    flag.on_set(lambda: calls.append("forgotten"))()  # unregistered before the interrupt
    flag.set()
    flag.set()
    flag.on_set(lambda: calls.append("late"))
    assert calls == ["waiting", "late"] and flag.is_set()
