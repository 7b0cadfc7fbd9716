"""The OpenAI-compatible /v1 of `hermetic serve`, over real HTTP (uvicorn on a free port), driven by the
official `openai` client and by raw requests shaped like Open WebUI's and LibreChat's."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from conftest import get_backend
from served_app import scripted_profiles, serve_app

from control_plane.api.app import create_app
from control_plane.store.tokens import TokenStore

SESSION = "X-Hermetic-Session"


class Served:
    def __init__(self, url: str, token: str, other: str) -> None:
        self.url = url
        self.token = token
        self.other = other
        """A token of another profile."""

    def client(self, token: str | None = None) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.url}/v1", api_key=token or self.token, max_retries=0, timeout=60
        )

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", **extra}

    def stream(self, body: dict[str, Any]) -> contextlib.AbstractContextManager[httpx.Response]:
        """POST `body` to /v1/chat/completions with this profile's token, the response streamed."""
        url = f"{self.url}/v1/chat/completions"
        return httpx.stream("POST", url, json=body, headers=self.headers(), timeout=60)

    def turn_end(self, session: str) -> dict[str, Any]:
        """The data of the `turn_end` event of a session's turn (the events read until it ends)."""
        events = httpx.get(
            f"{self.url}/sessions/{session}/events",
            params={"after": 0, "until_turn_end": "true"},
            headers=self.headers(),
            timeout=60,
        ).text
        data: dict[str, Any] = json.loads(
            events.rsplit("event: turn_end", 1)[1].split("data: ", 1)[1].splitlines()[0]
        )
        return data


def terminal_then(command: str, reply: str) -> list[dict[str, Any]]:
    """A model script: run `command` in the terminal, then answer `reply`."""
    return [{"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}, {"text": reply}]


@pytest.fixture
def served(request: pytest.FixtureRequest, tmp_path: Path, fake_llm: Any) -> Iterator[Served]:
    """The server on a free port; `limits` of the profiles from an indirect parameter, if any."""
    get_backend("local")
    limits = getattr(request, "param", {})
    settings_for = scripted_profiles(
        tmp_path,
        fake_llm.url,
        learning={"enabled": False},
        openai={"model_id": "hermetic-agent", "allowed_origins": ["http://localhost:3000"]},
        limits=limits,
    )
    tokens = TokenStore(tmp_path)
    token, other = tokens.create("alpha"), tokens.create("beta")
    with serve_app(create_app(tmp_path, settings_for)) as url:
        yield Served(url, token, other)


def sse(response: httpx.Response) -> list[tuple[str | None, str]]:
    """(event name, data) of each SSE event, in order."""
    events: list[tuple[str | None, str]] = []
    name: str | None = None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            events.append((name, line[6:]))
            name = None
    return events


def test_models_lists_the_profile_agent(served: Served) -> None:
    models = served.client().models.list()
    assert [m.id for m in models.data] == ["hermetic-agent"]
    assert served.client().models.retrieve("hermetic-agent").id == "hermetic-agent"
    with pytest.raises(openai.NotFoundError):
        served.client().models.retrieve("gpt-4o")
    with pytest.raises(openai.AuthenticationError) as refused:
        served.client("hmt_not-a-token").models.list()
    assert refused.value.body["type"] == "authentication_error"  # type: ignore[index]


def test_chat_completion_runs_the_agent_with_its_sandbox(served: Served, fake_llm: Any) -> None:
    fake_llm.load(terminal_then("echo sealed-$((6*7))", "The sandbox printed sealed-42."))
    raw = served.client().chat.completions.with_raw_response.create(
        model="hermetic-agent", messages=[{"role": "user", "content": "what does the sandbox say?"}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "The sandbox printed sealed-42."
    assert completion.choices[0].finish_reason == "stop" and completion.object == "chat.completion"
    assert completion.usage is not None and completion.usage.total_tokens > 0
    session = raw.headers[SESSION]
    detail = httpx.get(f"{served.url}/sessions/{session}", headers=served.headers()).json()
    tool = next(m for m in detail["messages"] if m["role"] == "tool")
    assert "sealed-42" in tool["content"]  # the command really ran in the session's sandbox
    assert detail["session"]["source"] == "openai"


def test_streaming_with_the_openai_client(served: Served, fake_llm: Any) -> None:
    fake_llm.load(terminal_then("echo streamed", "Done: the output was streamed."))
    stream = served.client().chat.completions.create(
        model="hermetic-agent", messages=[{"role": "user", "content": "go"}], stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Done: the output was streamed."
    final = chunks[-1]
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is not None and final.usage.completion_tokens > 0
    tools = [c.hermetic["type"] for c in chunks if getattr(c, "hermetic", None)]  # type: ignore[attr-defined]
    assert tools[0] == "tool_start" and tools[-1] == "tool_end"


def test_stream_wire_format(served: Served, fake_llm: Any) -> None:
    fake_llm.load(terminal_then("echo one; echo two", "ok"))
    body = {"model": "x", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with served.stream(body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse(response)
    assert events[-1] == (None, "[DONE]")
    named = [json.loads(data) for name, data in events if name == "hermetic.tool"]
    assert {e["hermetic"]["type"] for e in named} >= {"tool_start", "tool_end"}
    assert all(e["choices"] == [{"index": 0, "delta": {}}] for e in named)  # plain clients see nothing
    plain = [json.loads(data) for name, data in events[:-1] if name is None]
    assert plain[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert plain[-1]["choices"][0]["finish_reason"] == "stop" and plain[-1]["usage"]["total_tokens"] > 0
    end = next(e["hermetic"] for e in named if e["hermetic"]["type"] == "tool_end")
    assert "one\r\ntwo" in end["result"] or "one\ntwo" in end["result"]


def test_a_front_ends_multi_turn_chat_stays_one_session(served: Served, fake_llm: Any) -> None:
    """Open WebUI resends the whole history with its own extra fields; it never echoes our header."""
    fake_llm.load(
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "export KEPT=sandbox-state"}}]},
            {"text": "Set."},
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo $KEPT"}}]},
            {"text": "It is still there."},
            {"text": "Sandbox chat"},
        ]
    )
    system = {"role": "system", "content": "You are helpful."}
    first = {"role": "user", "content": [{"type": "text", "text": "set a variable"}]}
    openwebui_extras = {
        "stream": False,
        "params": {},
        "features": {"web_search": False},
        "chat_id": "c0ffee",
        "id": "msg-1",
        "session_id": "sock-1",
        "background_tasks": {"title_generation": True},
        "model_item": {"id": "hermetic-agent"},
    }
    url = f"{served.url}/v1/chat/completions"
    one = httpx.post(
        url,
        json={"model": "hermetic-agent", "messages": [system, first], **openwebui_extras},
        headers=served.headers(),
        timeout=60,
    )
    assert one.status_code == 200, one.text
    history = [
        system,
        first,
        {"role": "assistant", "content": one.json()["choices"][0]["message"]["content"]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "is it still set?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
    ]
    two = httpx.post(
        url,
        json={"model": "hermetic-agent", "messages": history, **openwebui_extras},
        headers=served.headers(),
    )
    assert two.status_code == 200, two.text
    assert two.headers[SESSION] == one.headers[SESSION]
    assert two.json()["choices"][0]["message"]["content"] == "It is still there."
    # the variable survived: same session, same sandbox shell
    assert "sandbox-state" in fake_llm.requests[3]["messages"][-1]["content"]
    # the new user message was the only one added, the image said as text
    user_turns = [m["content"] for m in fake_llm.requests[3]["messages"] if m["role"] == "user"]
    assert len(user_turns) == 2 and "cannot see images" in user_turns[1]
    assert "[instructions] You are helpful." in user_turns[0]  # the client's system prompt, told once

    # the title one-off (a different first message) is its own session, and leaves the chat alone
    title = httpx.post(
        url,
        json={
            "model": "hermetic-agent",
            "stream": False,
            "messages": [{"role": "user", "content": "### Task:\nGenerate a concise title for the chat..."}],
        },
        headers=served.headers(),
    )
    assert title.status_code == 200 and title.json()["choices"][0]["message"]["content"] == "Sandbox chat"
    assert title.headers[SESSION] != one.headers[SESSION]


def test_librechat_parameters_are_accepted_and_the_header_is_echoed(served: Served, fake_llm: Any) -> None:
    fake_llm.load([{"text": "first"}, {"text": "second"}])
    librechat = {
        "model": "hermetic-agent",
        "temperature": 0.7,
        "top_p": 1,
        "user": "6615f1c0ffee",
        "stop": ["\n\nHuman:"],
        "frequency_penalty": 0.5,
        "presence_penalty": 0.1,
        "logit_bias": {"50256": -100},
        "max_tokens": 1024,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream(
        "POST",
        f"{served.url}/v1/chat/completions",
        json={**librechat, "messages": [{"role": "user", "content": "hello"}]},
        headers=served.headers(),
        timeout=60,
    ) as response:
        assert response.status_code == 200
        session = response.headers[SESSION]
        assert (
            "".join(
                json.loads(d)["choices"][0]["delta"].get("content", "")
                for n, d in sse(response)[:-1]
                if n is None
            )
            == "first"
        )
    # a different history, but the echoed header keeps the session
    again = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={**librechat, "stream": False, "messages": [{"role": "user", "content": "unrelated"}]},
        headers=served.headers(**{SESSION: session}),
        timeout=60,
    )
    assert again.status_code == 200 and again.headers[SESSION] == session
    assert [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "user"] == [
        "hello",
        "unrelated",
    ]


def test_errors_come_in_openais_envelope(served: Served, fake_llm: Any) -> None:
    url = f"{served.url}/v1/chat/completions"
    cases = [
        ({"model": "m"}, served.headers(), 400, "invalid_request_error"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, served.headers(), 400, None),
        ({"model": "m", "messages": [{"role": "assistant", "content": "x"}]}, served.headers(), 400, None),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x" * 200_001}]},
            served.headers(),
            400,
            None,
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x" * 150_000}] * 14},
            served.headers(),
            400,
            None,
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}]},
            served.headers(**{SESSION: "s-nope"}),
            404,
            "not_found_error",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}]},
            served.headers(Origin="http://evil.example"),
            403,
            "permission_error",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, {}, 401, "authentication_error"),
    ]
    for body, headers, code, kind in cases:
        response = httpx.post(url, json=body, headers=headers)
        assert response.status_code == code, (body, response.text)
        error = response.json()["error"]
        assert error["message"] and (kind is None or error["type"] == kind)
    broken = httpx.post(
        url, content=b"{not json", headers={**served.headers(), "Content-Type": "application/json"}
    )
    assert broken.status_code == 400 and "error" in broken.json()
    # not UTF-8: FastAPI refuses it before validation (with Starlette's HTTPException), still enveloped
    garbled = httpx.post(
        url, content=b"\xff\x05\xfe", headers={**served.headers(), "Content-Type": "application/json"}
    )
    assert garbled.status_code == 400 and garbled.json()["error"]["type"] == "invalid_request_error"
    assert httpx.get(f"{served.url}/v1/embeddings", headers=served.headers()).json()["error"]["type"]
    for method, path, allow in [("PUT", "chat/completions", "POST"), ("DELETE", "models", "GET")]:
        refused = httpx.request(method, f"{served.url}/v1/{path}", headers=served.headers())
        assert refused.status_code == 405 and refused.headers["allow"] == allow, refused.text
        assert refused.json()["error"]["code"] == "method_not_allowed"
    allowed = httpx.get(f"{served.url}/v1/models", headers=served.headers(Origin="http://localhost:3000"))
    assert allowed.status_code == 200

    # another profile's session is not found, not shown
    fake_llm.load([{"text": "mine"}, {"error": 500, "message": "provider down"}])
    mine = served.client().chat.completions.with_raw_response.create(
        model="m", messages=[{"role": "user", "content": "a"}]
    )
    theirs = httpx.post(
        url,
        json={"model": "m", "messages": [{"role": "user", "content": "b"}]},
        headers={"Authorization": f"Bearer {served.other}", SESSION: mine.headers[SESSION]},
    )
    assert theirs.status_code == 404

    # the model failing is a 502 with the reason, through the official client too
    with pytest.raises(openai.APIStatusError) as failed:
        served.client().chat.completions.create(model="m", messages=[{"role": "user", "content": "c"}])
    assert failed.value.status_code == 502 and failed.value.body["code"] == "model_error"  # type: ignore[index]


def test_a_busy_session_is_a_409(served: Served, fake_llm: Any) -> None:
    fake_llm.load([{"text": "slow", "delay": 3}, {"text": "x"}])
    url = f"{served.url}/v1/chat/completions"
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "first"}]}
    with served.stream(body) as response:
        session = response.headers[SESSION]
        busy = httpx.post(
            url,
            json={"model": "m", "messages": [{"role": "user", "content": "more"}]},
            headers=served.headers(**{SESSION: session}),
        )
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"
        assert sse(response)[-1] == (None, "[DONE]")


@pytest.mark.parametrize("served", [{"max_running_sessions": 1}], indirect=True)
def test_a_run_over_the_profiles_limit_is_a_429(served: Served, fake_llm: Any) -> None:
    fake_llm.load([{"text": "slow", "delay": 3}])
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "first"}]}
    with served.stream(body) as response:
        with pytest.raises(openai.RateLimitError) as refused:  # another conversation: a second session
            served.client().chat.completions.create(
                model="m", messages=[{"role": "user", "content": "another conversation"}]
            )
        assert refused.value.body["code"] == "rate_limit_exceeded"  # type: ignore[index]
        assert "max_running_sessions" in refused.value.message
        assert int(refused.value.response.headers["Retry-After"]) > 0
        assert sse(response)[-1] == (None, "[DONE]")  # the running one was not disturbed


def test_a_client_that_disconnects_interrupts_the_run_and_its_command(served: Served, fake_llm: Any) -> None:
    fake_llm.load(terminal_then("echo started; sleep 120", "never"))
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "sleep"}]}
    with served.stream(body) as response:
        session = response.headers[SESSION]
        for line in response.iter_lines():
            if "tool_progress" in line and "started" in line:
                break  # the command runs: hang up
    assert served.turn_end(session)["reason"] == "interrupted"
    assert len(fake_llm.requests) == 1  # no model call after the hang-up
    # the sleep was interrupted too: the session's shell answers the next command at once
    fake_llm.load(terminal_then("echo after", "ok"))
    again = httpx.post(
        f"{served.url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "again"}]},
        headers=served.headers(**{SESSION: session}),
        timeout=60,
    )
    assert again.status_code == 200
    result = fake_llm.requests[1]["messages"][-1]["content"]
    assert "after" in result and "[exit code 0" in result


def test_responses_api_continues_by_previous_response_id(served: Served, fake_llm: Any) -> None:
    fake_llm.load(
        [
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "note.txt", "content": "kept"}}]},
            {"text": "Wrote it."},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "note.txt"}}]},
            {"text": "It says kept."},
        ]
    )
    client = served.client()
    first = client.responses.create(model="hermetic-agent", input="write a note", instructions="Be brief.")
    assert first.output_text == "Wrote it." and first.status == "completed"
    assert "[instructions] Be brief." in fake_llm.requests[0]["messages"][-1]["content"]
    second = client.responses.create(
        model="hermetic-agent",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "read it back"}]}],
        previous_response_id=first.id,
    )
    assert second.output_text == "It says kept." and second.usage is not None
    assert "kept" in fake_llm.requests[3]["messages"][-1]["content"]  # same session, same sandbox
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="m", input="x", previous_response_id="resp_s-none_00")


def test_serve_refuses_a_network_address_without_a_token(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from control_plane.cli.main import app

    result = CliRunner().invoke(
        app, ["serve", "--host", "0.0.0.0", "--port", "1"], env={"HERMETIC_ROOT": str(tmp_path)}
    )
    assert result.exit_code == 2 and "no API token" in result.output
    assert TokenStore(tmp_path).list() == []  # nothing was created, nothing listened


def test_a_plain_request_whose_client_hangs_up_interrupts_the_run(served: Served, fake_llm: Any) -> None:
    fake_llm.load(terminal_then("sleep 120", "x"))
    url = f"{served.url}/v1/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "wait for it"}]}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes the connection
        httpx.post(url, json=body, headers=served.headers(), timeout=3)
    sessions = httpx.get(f"{served.url}/sessions", headers=served.headers()).json()
    session = next(s["id"] for s in sessions if s["title"] == "wait for it")
    assert served.turn_end(session)["reason"] == "interrupted"


def test_responses_stream_with_the_openai_client(served: Served, fake_llm: Any) -> None:
    fake_llm.load(
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": "echo streamed-response"}}]},
            {"text": "The sandbox answered."},
            {"text": "Still here."},
        ]
    )
    client = served.client()
    events = list(client.responses.create(model="hermetic-agent", input="run it", stream=True))
    kinds = [event.type for event in events]
    assert kinds[:3] == ["response.created", "response.output_item.added", "response.content_part.added"]
    assert kinds[-1] == "response.completed" and "hermetic.tool" in kinds
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert deltas == "The sandbox answered."
    done = events[-1].response  # type: ignore[union-attr]
    assert done.output_text == "The sandbox answered." and done.status == "completed"
    tool_end = next(e for e in events if e.type == "hermetic.tool" and e.hermetic["type"] == "tool_end")  # type: ignore[attr-defined]
    assert "streamed-response" in tool_end.hermetic["result"]  # type: ignore[attr-defined]
    again = client.responses.create(model="hermetic-agent", input="and now?", previous_response_id=done.id)
    assert again.output_text == "Still here."
    assert [m["role"] for m in fake_llm.requests[2]["messages"]].count("user") == 2  # the same session
