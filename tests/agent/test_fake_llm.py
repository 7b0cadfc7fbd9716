"""The scripted OpenAI-compatible server, over real HTTP: what a client sees, and the CLI that serves it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.models.fake_llm import FakeLLM, ScriptError, load_script

ASK = {"model": "scripted", "messages": [{"role": "user", "content": "hello"}]}


def post(server: FakeLLM, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + "/chat/completions", json=body, timeout=10)


def sse(response: httpx.Response) -> list[Any]:
    """The data of each server-sent event: parsed JSON, or the raw text ([DONE])."""
    assert response.headers["content-type"] == "text/event-stream"
    events = [block.removeprefix("data: ") for block in response.text.split("\n\n") if block]
    return [event if event == "[DONE]" else json.loads(event) for event in events]


def test_a_plain_reply_is_an_openai_completion(fake_llm: FakeLLM) -> None:
    fake_llm.load([{"text": "Hello"}])
    data = post(fake_llm, ASK).json()
    assert data["object"] == "chat.completion" and data["model"] == "scripted"
    [choice] = data["choices"]
    assert choice["message"] == {"role": "assistant", "content": "Hello", "refusal": None}
    assert choice["finish_reason"] == "stop"
    assert data["usage"]["completion_tokens"] == 1 and data["usage"]["total_tokens"] > 1
    assert fake_llm.requests == [ASK]


def test_a_stream_sends_text_in_pieces_and_usage_only_when_asked(fake_llm: FakeLLM) -> None:
    fake_llm.load([{"text": "one two three"}, {"text": "one two three"}])
    events = sse(post(fake_llm, ASK | {"stream": True}))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(chunk["object"] == "chat.completion.chunk" and "usage" not in chunk for chunk in chunks)
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    pieces = [chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks]
    assert pieces[1:4] == ["one ", "two ", "three"]
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}

    with_usage = sse(post(fake_llm, ASK | {"stream": True, "stream_options": {"include_usage": True}}))
    last = with_usage[-2]
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 3
    assert all(chunk["usage"] is None for chunk in with_usage[:-2])


def test_streamed_tool_calls_arrive_split_by_index(fake_llm: FakeLLM) -> None:
    arguments = {"command": "grep -rn 'something long enough to split' /etc"}
    fake_llm.load(
        [{"tool_calls": [{"name": "terminal", "arguments": arguments}, {"name": "x", "arguments": "{"}]}]
    )
    chunks = sse(post(fake_llm, ASK | {"stream": True}))[:-1]
    deltas = [call for chunk in chunks for call in chunk["choices"][0]["delta"].get("tool_calls", [])]
    first = [delta for delta in deltas if delta["index"] == 0]
    assert first[0]["id"].startswith("call_") and first[0]["function"]["name"] == "terminal"
    assert len(first) > 3 and all("id" not in delta for delta in first[1:])
    assert "".join(delta["function"]["arguments"] for delta in first) == json.dumps(arguments)
    assert "".join(delta["function"]["arguments"] for delta in deltas if delta["index"] == 1) == "{"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_a_non_streamed_tool_call_reply(fake_llm: FakeLLM) -> None:
    fake_llm.load([{"tool_calls": [{"name": "terminal", "arguments": {"command": "ls"}}]}])
    [choice] = post(fake_llm, ASK).json()["choices"]
    assert choice["message"]["content"] is None and choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"] == {
        "name": "terminal",
        "arguments": '{"command": "ls"}',
    }


def test_scripted_errors_and_an_exhausted_script(fake_llm: FakeLLM) -> None:
    fake_llm.load([{"error": 429, "message": "slow down"}, {"error": 503}])
    first, second, third = post(fake_llm, ASK), post(fake_llm, ASK), post(fake_llm, ASK)
    assert first.status_code == 429 and first.json()["error"]["message"] == "slow down"
    assert second.status_code == 503 and second.json()["error"]["message"] == "scripted error 503"
    assert third.status_code == 500
    assert third.json()["error"]["message"] == "the script is exhausted: it has 2 turns and this is request 3"
    assert len(fake_llm.requests) == 3


def test_models_and_unknown_paths(fake_llm: FakeLLM) -> None:
    models = httpx.get(fake_llm.url + "/models", timeout=10).json()
    assert models["object"] == "list" and models["data"][0]["id"] == "scripted"
    assert httpx.post(fake_llm.url + "/completions", json=ASK, timeout=10).status_code == 404
    assert fake_llm.requests == []


def test_load_replaces_the_script_and_forgets_requests(fake_llm: FakeLLM) -> None:
    fake_llm.load([{"text": "a"}])
    post(fake_llm, ASK)
    fake_llm.load([{"text": "b"}])
    assert fake_llm.requests == []
    assert post(fake_llm, ASK).json()["choices"][0]["message"]["content"] == "b"


def test_stop_ends_a_delayed_answer() -> None:
    server = FakeLLM([{"text": "late", "delay": 60}]).start()
    with httpx.Client(timeout=30) as client, pytest.raises(httpx.TransportError):
        threading.Timer(0.2, server.stop).start()  # while the request waits for its answer
        client.post(server.url + "/chat/completions", json=ASK)
    assert len(server.requests) == 1


def test_scripts_load_from_yaml_and_json(tmp_path: Path) -> None:
    yaml_file = tmp_path / "script.yaml"
    yaml_file.write_text(
        '- text: "Let me look"\n  tool_calls:\n    - {name: terminal, arguments: {command: ls}}\n'
    )
    json_file = tmp_path / "script.json"
    json_file.write_text(json.dumps([{"error": 429, "message": "slow down"}, {"text": "hi", "delay": 0.5}]))
    [turn] = load_script(yaml_file)
    assert turn.text == "Let me look" and turn.tool_calls[0].arguments_text == '{"command": "ls"}'
    assert [(turn.error, turn.delay) for turn in load_script(json_file)] == [(429, 0.0), (None, 0.5)]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("text: hi", "a script is a list of turns"),
        ("- text: hi\n  colour: red", "turn 1 colour: Extra inputs are not permitted"),
        (
            "- text: hi\n- error: 429\n  text: also",
            "turn 2: Value error, a turn is either an error or a reply",
        ),
        ("- error: 200", "turn 1 error: Input should be greater than or equal to 400"),
        ("- [unclosed", "cannot read the script"),
    ],
)
def test_a_bad_script_says_what_is_wrong(tmp_path: Path, content: str, says: str) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(content)
    with pytest.raises(ScriptError, match=re.escape(says)):
        load_script(script)


def test_the_cli_serves_a_script_until_ctrl_c(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("- text: served by the cli\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "control_plane", "dev", "fake-llm", "--script", str(script), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        banner = [proc.stdout.readline() for _ in range(3)]
        url = re.search(r"at (http://127\.0\.0\.1:\d+/v1) ", banner[0])
        assert url, banner
        assert (
            f"HERMETIC_MODEL__API_BASE={url[1]}" in banner[1] and "HERMETIC_MODEL__NAME=openai/" in banner[1]
        )
        reply = httpx.post(url[1] + "/chat/completions", json=ASK, timeout=10).json()
        assert reply["choices"][0]["message"]["content"] == "served by the cli"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Stopped after 1 requests." in out


def test_the_cli_refuses_a_bad_script(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "control_plane", "dev", "fake-llm", "--script", str(tmp_path / "none.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "cannot read the script" in done.stderr
