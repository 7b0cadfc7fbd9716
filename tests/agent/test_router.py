"""The model router through real litellm over real HTTP to the scripted server."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fake_llm import scripted_model
from tls_reads import certificate_reads

from control_plane.config.settings import ModelEndpoint, ModelSettings
from control_plane.events import Event, Notice, ReasoningDelta, TextDelta, Usage
from control_plane.models import openai_wire
from control_plane.models.fake_llm import FakeLLM
from control_plane.models.router import ModelError, ModelNotConfigured, ModelReply, Router

HELLO = [{"role": "user", "content": "hello"}]
TERMINAL = {
    "type": "function",
    "function": {
        "name": "terminal",
        "description": "Run a command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}


@pytest.fixture(params=["auto", "litellm"])
def model(request: pytest.FixtureRequest, fake_llm: FakeLLM) -> Callable[..., ModelSettings]:
    """Settings for the scripted model, called both ways: "auto" sends through the openai SDK (an
    OpenAI-compatible server), "litellm" through litellm."""
    return lambda **overrides: scripted_model(fake_llm, client=request.param, **overrides)


def backup_of(model: Callable[..., ModelSettings], fake_llm: FakeLLM) -> ModelEndpoint:
    """A second model on the same server, called the same way as `model`."""
    client = model().client
    return ModelEndpoint(name="openai/backup", api_base=fake_llm.url, api_key="test", client=client)  # type: ignore[arg-type]


def complete(router: Router, stream: bool = True, **kwargs: Any) -> tuple[ModelReply, list[Event]]:
    events: list[Event] = []
    reply = asyncio.run(router.complete(HELLO, emit=events.append, stream=stream, **kwargs))
    return reply, events


def notices(events: list[Event]) -> list[str]:
    return [event.message for event in events if isinstance(event, Notice)]


@pytest.mark.parametrize("stream", [True, False])
def test_a_text_reply(fake_llm: FakeLLM, stream: bool, model: Callable[..., ModelSettings]) -> None:
    fake_llm.load([{"text": "Hello there, how can I help?"}])
    reply, events = complete(Router(model()), stream=stream)
    assert reply.content == "Hello there, how can I help?"
    assert reply.tool_calls == [] and reply.finish_reason == "stop" and reply.model == "openai/scripted"
    deltas = [event.text for event in events if isinstance(event, TextDelta)]
    if stream:
        assert len(deltas) > 1 and "".join(deltas) == reply.content
    else:
        assert deltas == []
    assert fake_llm.requests[0]["messages"] == HELLO and bool(fake_llm.requests[0].get("stream")) is stream


def test_the_first_streamed_chunk_is_written_before_the_rest_is_read(
    fake_llm: FakeLLM, model: Callable[..., ModelSettings]
) -> None:
    """The scripted server writes the whole reply at once, so its chunks sit buffered: a surface's sender
    task (woken by the first delta) and the writer task it hands to both run before the router reads
    on; the deltas still make up the reply, in order."""
    fake_llm.load([{"text": "one two three four five six"}])
    deltas: list[str] = []
    first = asyncio.Event()

    def emit(event: Event) -> None:
        if isinstance(event, TextDelta):
            deltas.append(event.text)
            first.set()

    async def run() -> tuple[ModelReply, int, int]:
        handed: asyncio.Queue[int] = asyncio.Queue()

        async def sender() -> int:
            await first.wait()
            handed.put_nowait(len(deltas))
            return len(deltas)

        async def writer() -> int:
            await handed.get()
            return len(deltas)

        sent, written = asyncio.create_task(sender()), asyncio.create_task(writer())
        reply = await Router(model()).complete(HELLO, emit=emit)
        return reply, await sent, await written

    reply, at_sender, at_writer = asyncio.run(run())
    assert at_sender == at_writer == 1 and len(deltas) > 1
    assert "".join(deltas) == reply.content == "one two three four five six"


@pytest.mark.parametrize("stream", [True, False])
def test_the_providers_reasoning_streams_as_its_own_events_and_is_kept_whole(
    fake_llm: FakeLLM, stream: bool, model: Callable[..., ModelSettings]
) -> None:
    thinking = "The user greets me; a short greeting back will do."
    fake_llm.load([{"reasoning": thinking, "text": "Hello!"}])
    reply, events = complete(Router(model()), stream=stream)
    assert reply.reasoning == thinking and reply.content == "Hello!"
    thoughts = [event.text for event in events if isinstance(event, ReasoningDelta)]
    if stream:
        assert len(thoughts) > 1 and "".join(thoughts) == thinking
        first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
        assert all(isinstance(e, ReasoningDelta) for e in events[:first_text] if not isinstance(e, Usage))
    else:
        assert thoughts == []  # no stream: the whole reasoning is in the reply
    assert "Hello!" not in "".join(thoughts)


@pytest.mark.parametrize("stream", [True, False])
def test_tool_calls_are_reassembled_exactly(
    fake_llm: FakeLLM, stream: bool, model: Callable[..., ModelSettings]
) -> None:
    long_command = {"command": "find / -name '*.py' | xargs grep -n 'def main' | head -50", "timeout": 30}
    fake_llm.load(
        [
            {
                "text": "Let me look",
                "tool_calls": [
                    {"name": "terminal", "arguments": {"command": "ls -la"}},
                    {"name": "terminal", "arguments": long_command},
                    {"name": "read_file", "arguments": '{"path": "a.txt", '},  # malformed, sent verbatim
                ],
            }
        ]
    )
    reply, _ = complete(Router(model()), stream=stream, tools=[TERMINAL])
    assert reply.content == "Let me look" and reply.finish_reason == "tool_calls"
    assert [(call.name, call.arguments) for call in reply.tool_calls] == [
        ("terminal", json.dumps({"command": "ls -la"})),
        ("terminal", json.dumps(long_command)),
        ("read_file", '{"path": "a.txt", '),
    ]
    assert len({call.id for call in reply.tool_calls}) == 3 and all(call.id for call in reply.tool_calls)
    assert fake_llm.requests[0]["tools"] == [TERMINAL]


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_errors_are_retried(
    fake_llm: FakeLLM, status: int, model: Callable[..., ModelSettings]
) -> None:
    fake_llm.load([{"error": status, "message": "slow down"}, {"text": "done"}])
    reply, events = complete(Router(model()))
    assert reply.content == "done" and len(fake_llm.requests) == 2
    [notice] = notices(events)
    assert "openai/scripted" in notice and str(status) in notice and "slow down" in notice
    assert "retry 1 of 2" in notice


def test_a_timeout_is_retried(fake_llm: FakeLLM, model: Callable[..., ModelSettings]) -> None:
    fake_llm.load([{"text": "late", "delay": 2.0}, {"text": "in time"}])
    reply, events = complete(Router(model(timeout=0.3)))
    assert reply.content == "in time" and len(fake_llm.requests) == 2
    assert "Timeout" in notices(events)[0]


def test_a_bad_request_is_not_retried(fake_llm: FakeLLM, model: Callable[..., ModelSettings]) -> None:
    fake_llm.load([{"error": 400, "message": "messages must not be empty"}, {"text": "never sent"}])
    with pytest.raises(ModelError) as caught:
        complete(Router(model()))
    assert len(fake_llm.requests) == 1
    assert "openai/scripted: BadRequestError 400: messages must not be empty" in str(caught.value)


def test_retries_exhausted_fall_back_to_the_next_model(
    fake_llm: FakeLLM, model: Callable[..., ModelSettings]
) -> None:
    fake_llm.load([{"error": 500}, {"error": 500}, {"error": 503}, {"text": "from the backup"}])
    backup = backup_of(model, fake_llm)
    reply, events = complete(Router(model(name="openai/primary", fallbacks=[backup])))
    assert reply.content == "from the backup" and reply.model == "openai/backup"
    assert [request["model"] for request in fake_llm.requests] == ["primary"] * 3 + ["backup"]
    said = notices(events)
    assert len(said) == 3 and "retry 2 of 2" in said[1]
    assert (
        said[2].startswith("openai/primary failed (")
        and "Error 503: scripted error 503)" in said[2]
        and "openai/backup" in said[2]
    )
    [usage] = [event for event in events if isinstance(event, Usage)]
    assert usage.model == "openai/backup"


def test_all_models_failing_is_a_model_error_listing_each(
    fake_llm: FakeLLM, model: Callable[..., ModelSettings]
) -> None:
    fake_llm.load([{"error": 401, "message": "bad key"}, {"error": 404, "message": "no such model"}])
    backup = backup_of(model, fake_llm)
    with pytest.raises(ModelError) as caught:
        complete(Router(model(name="openai/primary", fallbacks=[backup])))
    message = str(caught.value)
    assert message.startswith("No model answered:")
    assert "openai/primary: AuthenticationError 401: bad key" in message
    assert "openai/backup: NotFoundError 404: no such model" in message
    assert len(fake_llm.requests) == 2


def test_an_exhausted_script_says_so(fake_llm: FakeLLM, model: Callable[..., ModelSettings]) -> None:
    with pytest.raises(ModelError, match="the script is exhausted"):
        complete(Router(model(retries=0)))


def test_a_missing_key_is_named_before_any_http_call(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    router = Router(ModelSettings(name="anthropic/claude-sonnet-4-5", api_base=fake_llm.url))
    [problem] = router.problems()
    assert problem.startswith("anthropic/claude-sonnet-4-5: no API key: set ANTHROPIC_API_KEY")
    with pytest.raises(ModelError, match="anthropic/claude-sonnet-4-5: no API key: set ANTHROPIC_API_KEY"):
        complete(router)
    assert fake_llm.requests == []


def test_a_local_server_without_a_key_says_which_to_set(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    [problem] = Router(ModelSettings(name="openai/scripted", api_base=fake_llm.url)).problems()
    assert "OPENAI_API_KEY" in problem and "HERMETIC_MODEL__API_KEY" in problem and "local server" in problem


def test_an_unknown_provider_is_named_before_any_http_call(fake_llm: FakeLLM, capsys: Any) -> None:
    router = Router(ModelSettings(name="nope/thing", api_base=fake_llm.url, api_key="test"))  # type: ignore[arg-type]
    [problem] = router.problems()
    assert problem.startswith("nope/thing: unknown model or provider") and "PROVIDER/MODEL" in problem
    with pytest.raises(ModelError, match="nope/thing: unknown model or provider"):
        complete(router)
    assert fake_llm.requests == []
    assert "Provider List" not in capsys.readouterr().out  # litellm's banner is silenced


def test_a_misconfigured_primary_falls_back_with_a_notice(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch, model: Callable[..., ModelSettings]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    fake_llm.load([{"text": "backup here"}])
    backup = backup_of(model, fake_llm)
    reply, events = complete(Router(ModelSettings(name="anthropic/claude-sonnet-4-5", fallbacks=[backup])))
    assert reply.content == "backup here" and [r["model"] for r in fake_llm.requests] == ["backup"]
    assert "ANTHROPIC_API_KEY" in notices(events)[0]


def test_no_model_says_how_to_configure_one() -> None:
    router = Router(ModelSettings())
    with pytest.raises(ModelNotConfigured) as caught:
        complete(router)
    text = str(caught.value)
    for how in (
        "HERMETIC_MODEL__NAME=",
        "config.yaml",
        "model:",
        "--model",
        "ollama_chat/",
        "openai/",
        "API_BASE",
    ):
        assert how in text
    assert router.problems() == [text]


@pytest.mark.parametrize("stream", [True, False])
def test_usage_and_cost_are_recorded(
    fake_llm: FakeLLM, stream: bool, model: Callable[..., ModelSettings]
) -> None:
    reply_text = "x" * 400  # 100 rough tokens
    fake_llm.load([{"text": reply_text}, {"text": reply_text}])
    reply, events = complete(Router(model()), stream=stream)
    [usage] = [event for event in events if isinstance(event, Usage)]
    assert usage == reply.usage and usage.completion_tokens == 100 and usage.prompt_tokens > 0
    assert usage.cost is None  # litellm has no price for "scripted"
    priced, _ = complete(Router(model(name="openai/gpt-4o")), stream=stream)
    assert priced.usage.cost is not None and priced.usage.cost > 0


def test_a_retry_after_streamed_text_says_the_reply_restarts(
    fake_llm: FakeLLM, model: Callable[..., ModelSettings]
) -> None:
    fake_llm.load([{"text": "the first try breaks off half way", "drop": True}, {"text": "the full answer"}])
    reply, events = complete(Router(model()))
    assert reply.content == "the full answer" and len(fake_llm.requests) == 2
    [notice] = notices(events)
    assert "Connection error" in notice and notice.endswith("the reply restarts")
    shown = [event.text if isinstance(event, TextDelta) else event for event in events]
    after_notice = shown[[type(item) for item in shown].index(Notice) + 1 :]
    assert after_notice[:3] == ["the ", "full ", "answer"] and isinstance(after_notice[3], Usage)


def test_a_fallback_after_streamed_text_says_the_reply_restarts(
    fake_llm: FakeLLM, model: Callable[..., ModelSettings]
) -> None:
    fake_llm.load([{"text": "the first try breaks off half way", "drop": True}, {"text": "backup"}])
    backup = backup_of(model, fake_llm)
    reply, events = complete(Router(model(retries=0, fallbacks=[backup])))
    assert reply.content == "backup" and reply.model == "openai/backup"
    [notice] = notices(events)
    assert "trying openai/backup" in notice and notice.endswith("the reply restarts")


def test_cancelling_a_waiting_call_is_prompt(fake_llm: FakeLLM, model: Callable[..., ModelSettings]) -> None:
    fake_llm.load([{"text": "too late", "delay": 30.0}])
    router = Router(model(timeout=60.0))

    async def cancel_soon() -> float:
        task = asyncio.create_task(router.complete(HELLO))
        while not fake_llm.requests:  # the request has reached the server
            await asyncio.sleep(0.01)
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - cancelled_at

    asyncio.run(asyncio.wait_for(cancel_soon(), timeout=10))
    assert len(fake_llm.requests) == 1  # cancelled, not retried


def inotify_instances() -> int:
    """This process's inotify instances (each an fd on anon_inode:inotify)."""
    fds = Path("/proc/self/fd")
    return sum(1 for fd in fds.iterdir() if _link(fd) == "anon_inode:inotify")


def _link(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:  # the fd listing itself, closed by now
        return ""


def test_model_calls_hold_no_inotify_instance(fake_llm: FakeLLM, model: Callable[..., ModelSettings]) -> None:
    """Each call's event loop gets its own aiohttp session, which litellm never closes: a resolver holding
    an inotify instance (aiodns's, when installed) would leak one per call until the per-user limit,
    shared with every sandbox's file watch, ran out (CI: 'cannot watch: Too many open files')."""
    router = Router(model())
    fake_llm.load([{"text": "warm"}])
    complete(router)
    before = inotify_instances()
    fake_llm.load([{"text": f"reply {n}"} for n in range(5)])
    for _ in range(5):
        complete(router)
    assert inotify_instances() == before


def open_sockets() -> int:
    return sum(1 for fd in Path("/proc/self/fd").iterdir() if _link(fd).startswith("socket:"))


def test_connections_of_finished_event_loops_are_let_go(fake_llm: FakeLLM) -> None:
    """The openai SDK's client (and its keep-alive connection) is kept per event loop; each asyncio.run
    here is a new loop, whose client must go once the loop has closed, not pile up."""
    router = Router(scripted_model(fake_llm))
    fake_llm.load([{"text": f"reply {n}"} for n in range(11)])
    complete(router)
    gc.collect()
    before = open_sockets()
    for _ in range(10):
        complete(router)
    gc.collect()
    assert open_sockets() <= before + 1  # the last loop's connection, not yet swept


def test_the_certificates_are_read_once_for_every_loop(
    fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client is made per event loop (the interactive CLI runs one per turn); reading the system's
    certificates for each took 20 ms of every such turn."""
    router = Router(scripted_model(fake_llm))
    fake_llm.load([{"text": f"reply {n}"} for n in range(4)])
    complete(router)  # the first: litellm's import reads them too, for clients of its own
    reads = certificate_reads(monkeypatch)
    for _ in range(3):
        complete(router)
    assert reads == []


@pytest.mark.parametrize(
    ("name", "api_base", "client", "via_sdk"),
    [
        ("openai/qwen3", "http://127.0.0.1:8000/v1", "auto", True),
        ("openai/qwen3", "http://127.0.0.1:8000/v1", "litellm", False),
        ("openai/gpt-4.1", None, "auto", False),  # hosted OpenAI: litellm knows its models' parameters
        ("hosted_vllm/qwen3", "http://127.0.0.1:8000/v1", "auto", False),
        ("ollama_chat/qwen3", "http://127.0.0.1:11434", "auto", False),
    ],
)
def test_which_models_are_called_with_the_openai_sdk(
    name: str, api_base: str | None, client: str, via_sdk: bool
) -> None:
    endpoint = ModelEndpoint(name=name, api_base=api_base, client=client)  # type: ignore[arg-type]
    assert openai_wire.speaks_openai(endpoint) is via_sdk
