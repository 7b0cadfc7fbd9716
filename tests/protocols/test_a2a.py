"""Hermetic as an A2A server: `hermetic serve`'s app under uvicorn on loopback, driven by the a2a-sdk's
own client (JSON-RPC, protocol 1.0) and the scripted model; raw requests for what a client never sends."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2AClientError, Client, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError
from a2a_calls import message, send
from conftest import get_backend
from hermetic_cli import hermetic, scripted_env
from served_app import scripted_profiles, serve_app

from control_plane.api.app import create_app
from control_plane.config.settings import SkillsSettings
from control_plane.models.fake_llm import FakeLLM
from control_plane.skills.library import SkillLibrary
from control_plane.store.tokens import TokenStore
from control_plane.tools.a2a_client import RemoteAgentError, call_agent


@dataclass
class Served:
    url: str
    token: str
    other: str
    """A token of another profile."""


@pytest.fixture
def served(tmp_path: Path, fake_llm: FakeLLM) -> Iterator[Served]:
    get_backend("local")
    settings_for = scripted_profiles(
        tmp_path, fake_llm.url, learning={"enabled": False}, toolsets=["terminal", "clarify"]
    )
    tokens = TokenStore(tmp_path)
    token, other = tokens.create("alpha"), tokens.create("beta")
    # a skill in alpha's library (merged unverified: no checks to run)
    library = SkillLibrary(
        settings_for("alpha").home / "skills",
        SkillsSettings(allow_unverified=True),
        lambda: get_backend("local"),
    )
    skill = "---\nname: notes\ndescription: Keeps the team's notes.\n---\nWrite them down.\n"
    library.write("notes", "SKILL.md", skill, new=True)
    assert library.submit("notes", proposer="test").version == 1
    with serve_app(create_app(tmp_path, settings_for)) as url:
        yield Served(url, token, other)


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 90))


@asynccontextmanager
async def a2a_client(
    served: Served, token: str | None = None, streaming: bool = False
) -> AsyncIterator[Client]:
    """The SDK's client for the served agent, from its card, signed in with `token` (default: alpha's)."""
    headers = {"Authorization": f"Bearer {token or served.token}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        client = await ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create_from_url(
            served.url
        )
        yield client


def status_lines(task: Task) -> list[str]:
    return [get_message_text(m) for m in task.history if m.role == Role.ROLE_AGENT]


def test_card_lists_the_skills_and_the_bearer_scheme(served: Served) -> None:
    card = httpx.get(f"{served.url}/.well-known/agent-card.json", timeout=30).json()
    signed = httpx.get(f"{served.url}/.well-known/agent-card.json", headers=headers(served.token)).json()
    assert {"id": "skill:notes", "name": "notes", "description": "Keeps the team's notes.",
            "tags": ["skill"]} in signed["skills"]  # fmt: skip
    assert signed["name"] == "Hermetic (alpha)" and card["name"] == "Hermetic (default)"
    assert not [skill for skill in card["skills"] if skill["id"].startswith("skill:")]  # not to anyone
    assert card["supportedInterfaces"] == [
        {"url": f"{served.url}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    assert card["capabilities"]["streaming"] is True
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
    skills = {skill["id"]: skill for skill in card["skills"]}
    assert {"task", "toolset:terminal", "toolset:clarify"} <= set(skills)
    assert "terminal:" in skills["toolset:terminal"]["description"]
    assert "toolset:browser" not in skills  # only the toolsets the profile's runs get


def test_a_task_runs_a_tool_and_its_context_is_one_session(served: Served, fake_llm: FakeLLM) -> None:
    fake_llm.load(
        [
            call("terminal", command="echo sealed-$((6*7)) > out.txt; cat out.txt"),
            {"text": "The sandbox printed sealed-42."},
            call("terminal", command="cat out.txt"),
            {"text": "Still there."},
        ]
    )

    async def session() -> tuple[Task, Task, Task]:
        async with a2a_client(served) as client:
            first = await send(client, message("Print the answer in the sandbox"))
            again = await send(client, message("Is the file still there?", context_id=first.context_id))
            got = await client.get_task(GetTaskRequest(id=first.id))
            return first, again, got

    first, again, got = run(session())
    assert first.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_message_text(first.status.message) == "The sandbox printed sealed-42."
    reply, written = first.artifacts  # the reply, then the file the task wrote (with its bytes)
    assert reply.artifact_id == "reply" and get_artifact_text(reply, "") == "The sandbox printed sealed-42."
    assert written.artifact_id == "file:out.txt" and written.parts[0].raw == b"sealed-42\n"
    lines = status_lines(first)
    assert any(line.startswith("terminal echo sealed") for line in lines)
    assert any(line.startswith("terminal ok: ") and "sealed-42" in line for line in lines)
    assert "sealed-42" in fake_llm.requests[1]["messages"][-1]["content"]  # the tool really ran
    # the same context is the same session and sandbox: its history and its workspace
    assert again.context_id == first.context_id and again.id != first.id
    assert again.status.state == TaskState.TASK_STATE_COMPLETED
    assert [a.artifact_id for a in again.artifacts] == ["reply"]  # out.txt is unchanged: not sent again
    assert "sealed-42" in fake_llm.requests[3]["messages"][-1]["content"]
    users = [m["content"] for m in fake_llm.requests[2]["messages"] if m["role"] == "user"]
    assert users[0].endswith("Print the answer in the sandbox") and users[-1].endswith("still there?")
    assert got.status.state == TaskState.TASK_STATE_COMPLETED and got.id == first.id


def test_streaming_sends_status_and_reply_chunks(served: Served, fake_llm: FakeLLM) -> None:
    fake_llm.load([call("terminal", command="echo streamed"), {"text": "Done: the output was streamed."}])

    async def stream() -> list[StreamResponse]:
        async with a2a_client(served, streaming=True) as client:
            return [response async for response in client.send_message(message("stream it"))]

    responses = run(stream())
    kinds = [response.WhichOneof("payload") for response in responses]
    assert kinds[0] == "task" and responses[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    updates = [r.status_update for r in responses if r.HasField("status_update")]
    assert updates[-1].status.state == TaskState.TASK_STATE_COMPLETED
    working = [get_message_text(u.status.message) for u in updates[:-1]]
    assert "terminal echo streamed" in working and "streamed\n" in working  # the call, then its output
    chunks = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    assert len(chunks) > 2 and {c.artifact.artifact_id for c in chunks} == {"reply"}
    assert "".join(get_artifact_text(c.artifact, "") for c in chunks) == "Done: the output was streamed."
    assert [c.append for c in chunks] == [False] + [True] * (len(chunks) - 1) and chunks[-1].last_chunk
    assert kinds.index("artifact_update") > kinds.index("status_update")  # the reply after the tool call


def test_a_burst_of_deltas_streams_as_few_chunks_first_at_once(served: Served, fake_llm: FakeLLM) -> None:
    """The scripted model writes its reply in one go: the SDK saving the whole task per chunk made a long
    burst quadratic, so deltas that reach the task together go as one chunk, the first on its own."""
    words = [f"w{n}" for n in range(300)]
    fake_llm.load([{"text": " ".join(words)}])

    async def stream() -> list[StreamResponse]:
        async with a2a_client(served, streaming=True) as client:
            return [response async for response in client.send_message(message("say it"))]

    responses = run(stream())
    chunks = [r.artifact_update for r in responses if r.HasField("artifact_update")]
    texts = [get_artifact_text(c.artifact, "") for c in chunks]
    assert "".join(texts) == " ".join(words) and texts[0] == "w0 "
    assert 2 < len(chunks) < 30 and chunks[-1].last_chunk
    assert responses[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


def test_cancel_interrupts_the_run_and_its_command(served: Served, fake_llm: FakeLLM) -> None:
    fake_llm.load(
        [
            call("terminal", command="echo started; sleep 120"),
            call("terminal", command="echo after"),
            {"text": "after the cancel"},
        ]
    )

    async def session() -> tuple[Task, Task, Task]:
        async with a2a_client(served, streaming=True) as client:
            stream = client.send_message(message("go"))
            task_id = ""
            async for response in stream:
                if response.HasField("task"):
                    task_id = response.task.id
                if response.HasField("status_update") and "started" in get_message_text(
                    response.status_update.status.message
                ):
                    break  # the command is running in the sandbox
            canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
            await stream.aclose()
            got = await client.get_task(GetTaskRequest(id=task_id))
        async with a2a_client(served) as client:  # the session's shell is free again
            after = await send(client, message("and now?", context_id=got.context_id))
        return canceled, got, after

    canceled, got, after = run(session())  # long before the sleep is over
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert got.status.state == TaskState.TASK_STATE_CANCELED
    assert after.status.state == TaskState.TASK_STATE_COMPLETED
    assert "after" in fake_llm.requests[-1]["messages"][-1]["content"]
    assert len(fake_llm.requests) == 3  # no model call after the cancel until the next message


def test_a_question_is_input_required_and_the_next_message_answers(served: Served, fake_llm: FakeLLM) -> None:
    fake_llm.load([call("clarify", question="Which one?", choices=["red", "blue"]), {"text": "blue it is"}])

    async def session() -> tuple[Task, Task, Task]:
        async with a2a_client(served) as client:
            asked = await send(client, message("pick a colour"))
            wrong = await send(client, message("purple", asked))
            done = await send(client, message("blue", asked))
            return asked, wrong, done

    asked, wrong, done = run(session())
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert get_message_text(asked.status.message) == "Which one? (answer one of: red, blue)"
    assert wrong.status.state == TaskState.TASK_STATE_INPUT_REQUIRED and wrong.id == asked.id
    assert "answer one of: red, blue" in get_message_text(wrong.status.message)
    assert done.status.state == TaskState.TASK_STATE_COMPLETED and done.id == asked.id
    assert get_message_text(done.status.message) == "blue it is"
    assert fake_llm.requests[-1]["messages"][-1]["content"] == "the user answered: blue"


def test_a_bad_token_is_refused_and_tasks_are_the_profiles_own(served: Served, fake_llm: FakeLLM) -> None:
    fake_llm.load([{"text": "mine"}])
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}
    refused = httpx.post(f"{served.url}/a2a", json=body, headers={"Authorization": "Bearer hmt_nope"})
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    assert httpx.post(f"{served.url}/a2a", json=body).status_code == 401

    async def session() -> None:
        async with a2a_client(served, token="hmt_nope") as client:  # the card is public; the call is not
            with pytest.raises(A2AClientError):
                await send(client, message("hello"))
        with pytest.raises(RemoteAgentError, match="401"):  # what `hermetic a2a call` says then
            await call_agent(served.url, "hello", token="hmt_nope")
        async with a2a_client(served) as client:
            mine = await send(client, message("hello"))
        async with a2a_client(served, token=served.other) as client:
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id=mine.id))

    run(session())
    assert len(fake_llm.requests) == 1


def test_malformed_requests_get_json_rpc_errors(served: Served, fake_llm: FakeLLM) -> None:
    fake_llm.load([{"text": "still here"}])
    headers = {"Authorization": f"Bearer {served.token}", "A2A-Version": "1.0"}

    def post(content: bytes | str, **extra: str) -> dict[str, Any]:
        answer = httpx.post(f"{served.url}/a2a", content=content, headers={**headers, **extra}, timeout=30)
        assert answer.status_code == 200, answer.text
        result: dict[str, Any] = answer.json()
        return result

    def send_body(method: str, message: Any) -> str:
        return httpx.Request("POST", "/", json={"jsonrpc": "2.0", "id": 7, "method": method,
                             "params": {"message": message}}).content.decode()  # fmt: skip

    assert post(b'{"jsonrpc": "2.0", "id": 1, "method": ')["error"]["code"] == -32700
    assert post(b'[{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}]')["error"]["code"] == -32600
    assert post(b'{"jsonrpc": "2.0", "id": 2, "method": "tasks/explode"}')["error"]["code"] == -32601
    assert post(send_body("SendMessage", "not a message"))["error"]["code"] == -32602
    no_text = {"role": "ROLE_USER", "messageId": "m1", "parts": [{"data": {"a": 1}}]}
    assert post(send_body("SendMessage", no_text))["error"]["code"] == -32602
    nul = {"role": "ROLE_USER", "messageId": "m2", "parts": [{"text": "a\u0000b"}]}
    assert post(send_body("SendMessage", nul))["error"]["code"] == -32602
    assert post(send_body("SendMessage", nul), **{"A2A-Version": "9.0"})["error"]["code"] == -32009
    unknown = '{"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": "nope"}}'
    assert post(unknown)["error"]["code"] == -32001  # TaskNotFoundError
    # the v0.3 method names are served too, and the agent is alive after all of the above
    legacy = {"role": "user", "messageId": "m3", "parts": [{"kind": "text", "text": "hello"}]}
    answer = post(send_body("message/send", legacy), **{"A2A-Version": ""})
    assert answer["result"]["status"]["state"] == "completed", answer
    assert len(fake_llm.requests) == 1


def test_hermetic_calls_a_served_hermetic(served: Served, fake_llm: FakeLLM, tmp_path: Path) -> None:
    """`hermetic a2a call` (another profile's home, as another machine's agent would be) gives the served
    agent a task, shows its progress, and answers its question with --task."""
    fake_llm.load(
        [
            call("terminal", command="echo remote-$((6*7))"),
            call("clarify", question="Which one?", choices=["red", "blue"]),
            {"text": "The remote agent printed remote-42 and picked red."},
        ]
    )
    env = scripted_env(tmp_path / "caller", fake_llm.url, HERMETIC_A2A_TOKEN=served.token)
    asked = hermetic("a2a", "call", served.url, "Print the answer, then ask me", env=env)
    assert asked.returncode == 3, asked.stderr
    assert asked.stdout.strip() == "Which one? (answer one of: red, blue)"
    assert "terminal echo remote-$((6*7))" in asked.stderr and "remote-42" in asked.stderr
    task, context = re.search(r"--task (\S+) --context (\S+)", asked.stderr).groups()  # type: ignore[union-attr]
    done = hermetic("a2a", "call", served.url, "red", "--task", task, "--context", context, "-q", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "The remote agent printed remote-42 and picked red."
    assert done.stderr.strip() == f"task {task} (context {context}): completed"
    assert fake_llm.requests[-1]["messages"][-1]["content"] == "the user answered: red"
    assert len(fake_llm.requests) == 3


def test_ctrl_c_in_a2a_call_cancels_the_task(served: Served, fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.load([call("terminal", command="echo started; sleep 120"), {"text": "never reached"}])
    env = scripted_env(tmp_path / "caller", fake_llm.url, HERMETIC_A2A_TOKEN=served.token)
    command = [sys.executable, "-m", "control_plane", "a2a", "call", served.url, "Run the long one"]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as cli:
        assert cli.stderr is not None
        for line in cli.stderr:
            if line.strip() == "started":  # the remote command is running
                cli.send_signal(signal.SIGINT)
                break
        out, err = cli.communicate(timeout=90)  # long before the sleep is over
    assert cli.returncode == 130, err
    assert err.rstrip().endswith("canceled\ninterrupted: the task was canceled")
    task_id = re.search(r"task (\S+) \(context", err).group(1)  # type: ignore[union-attr]

    async def get() -> Task:
        async with a2a_client(served) as client:
            return await client.get_task(GetTaskRequest(id=task_id))

    assert run(get()).status.state == TaskState.TASK_STATE_CANCELED
    assert len(fake_llm.requests) == 1  # the run stopped: no model call after the command
