"""Context compression: cut points and stages on crafted histories, then through the real agent loop
(real litellm over HTTP to the scripted model server, a real local sandbox, real SQLite)."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from agent_runs import call, run, settings_for
from fake_llm import scripted_model

from control_plane.agent.agent import Agent
from control_plane.agent.compression import DEFAULT_WINDOW, SHORTENED_MARK, SUMMARY_MARK, Compressor, _units
from control_plane.config.settings import CompressionSettings, ModelSettings, Settings
from control_plane.events import Event
from control_plane.models.fake_llm import FakeLLM
from control_plane.models.router import Router, _litellm
from control_plane.tools import TOOLS

MODEL = "openai/scripted"
SUMMARY = "## Goal\n- count words\n## Decisions\n- used python3\n## Open work\n- none"
WORDS = "python3 -c \"print(' '.join('word%d' % i for i in range(300)))\""  # about 700 tokens of output


def tool_step(
    n: int, output: str, name: str = "terminal", content: str | None = None, **arguments: Any
) -> list[dict[str, Any]]:
    """An assistant message calling one tool, and its result."""
    arguments = arguments or {"command": f"step {n}"}
    wire = {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return [
        {"role": "assistant", "content": content, "tool_calls": [wire]},
        {"role": "tool", "tool_call_id": f"c{n}", "name": name, "content": output},
    ]


def big(n: int, lines: int = 120) -> str:
    """About 12 tokens a line."""
    return (
        "\n".join(f"line {i} of output {n}: some words here" for i in range(lines))
        + "\n[exit code 0 · cwd /w]"
    )


def talk(n: int, words: int) -> str | None:
    """Assistant text, which shortening tool outputs does not reduce."""
    return " ".join(f"thought{n}-{i}" for i in range(words)) or None


def crafted(steps: int = 6, lines: int = 120, words: int = 0) -> list[dict[str, Any]]:
    history = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "first request"}]
    for n in range(steps):
        history += tool_step(n, big(n, lines), content=talk(n, words))
    return history + [{"role": "assistant", "content": "done so far"}, {"role": "user", "content": "go on"}]


def assert_valid(messages: list[dict[str, Any]]) -> None:
    """System first, and every tool call answered right after its assistant message, in one group."""
    assert messages[0]["role"] == "system"
    assert all(m["role"] != "system" for m in messages[1:])
    for unit in _units(messages[1:]):
        calls = [c["id"] for c in unit[0].get("tool_calls") or []]
        assert [m["tool_call_id"] for m in unit[1:]] == calls, unit


def compressor(router: Router | None = None, **settings: Any) -> Compressor:
    return Compressor(CompressionSettings(**settings), router or Router(ModelSettings(name=MODEL)))


def test_under_the_threshold_nothing_changes(fake_llm: FakeLLM) -> None:
    history = crafted(steps=1)
    result = asyncio.run(
        compressor(Router(scripted_model(fake_llm)), context_window=100_000).maybe_compress(history, MODEL)
    )
    assert result is None and fake_llm.requests == []


def test_stage_one_alone_when_it_is_enough(fake_llm: FakeLLM) -> None:
    history = crafted(steps=6)
    comp = compressor(Router(scripted_model(fake_llm)), context_window=8000)
    assert comp.count(history, MODEL) > 6000  # past 75% of the window
    result = asyncio.run(comp.maybe_compress(history, MODEL))
    assert result is not None and result.summary_kind == "tool_outputs"
    assert fake_llm.requests == []  # no model was asked
    assert result.after_tokens == comp.count(result.messages, MODEL) <= 3000 < result.before_tokens
    assert_valid(result.messages)
    assert len(result.messages) == len(history)  # nothing dropped, only tool outputs shortened
    tools = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert tools[0].startswith(SHORTENED_MARK)
    assert f'terminal({{"command": "step 0"}}) · exit 0 · {len(big(0)):,} chars' in tools[0]
    assert 'first line: "line 0 of output 0: some words here"' in tools[0]
    assert "context compressed from" in result.notice and "tool outputs shortened" in result.notice
    assert history[3]["content"] == big(0, 120)  # the caller's history is left as it was


def test_cut_points_and_the_model_summary(fake_llm: FakeLLM) -> None:
    fake_llm.load([{"text": SUMMARY}])
    history = crafted(steps=8, words=200)
    comp = compressor(Router(scripted_model(fake_llm)), context_window=16_000)
    result = asyncio.run(comp.maybe_compress(history, MODEL, tools=None))
    assert result is not None and result.summary_kind == "model"
    messages = result.messages
    assert_valid(messages)
    # head: the system prompt, the first request and the step answering it (its output shortened)
    assert messages[:3] == history[:3]
    assert messages[3]["content"].startswith(SHORTENED_MARK)
    # then the summary, as a user message marked as such
    assert messages[4]["role"] == "user" and messages[4]["content"].startswith(SUMMARY_MARK)
    assert messages[4]["content"].endswith(SUMMARY)
    # tail: the latest messages verbatim, within 20% of the window (3,200 tokens; a step is ~2,500)
    assert messages[5:] == history[-4:]
    assert result.after_tokens < 8_000
    # the summary model got the middle as text, tool outputs in their one-line form, and no tools
    [request] = fake_llm.requests
    assert "tools" not in request and request["max_tokens"] == 2000
    text = request["messages"][1]["content"]
    assert 'ASSISTANT CALLS terminal({"command": "step 1"})' in text and 'step 6"' in text
    assert "TOOL RESULT (terminal): [tool output shortened" in text
    assert 'step 0"' not in text and 'step 7"' not in text  # head and tail are not summarized
    assert "summarized by openai/scripted" in result.notice


def test_a_tool_call_is_never_split_from_its_results(fake_llm: FakeLLM) -> None:
    fake_llm.load([{"text": SUMMARY}])
    history = crafted(steps=3, lines=400)
    parallel = tool_step(10, big(10, 400)) + tool_step(11, big(11, 400))
    parallel[0]["tool_calls"] += parallel[2]["tool_calls"]  # one assistant message, two calls
    history += [parallel[0], parallel[1], parallel[3], {"role": "assistant", "content": "both read"}]
    for window in (6_000, 9_000, 12_000, 20_000):
        fake_llm.load([{"text": SUMMARY}])
        result = asyncio.run(
            compressor(Router(scripted_model(fake_llm)), context_window=window).maybe_compress(history, MODEL)
        )
        assert result is not None
        assert_valid(result.messages)


def test_failed_summary_call_falls_back_to_a_deterministic_summary(fake_llm: FakeLLM) -> None:
    fake_llm.load([{"error": 500, "message": "summarizer down"}])
    history = crafted(steps=2, lines=400, words=200)
    history += [{"role": "user", "content": "now fix config.yaml please"}]
    history += tool_step(20, "error: no such file: config.yaml", name="read_file", path="config.yaml")
    history += tool_step(21, "oops\n[exit code 2 · cwd /w]", command="make test")
    history += tool_step(22, big(22, 400), name="write_file", path="src/app.py", content="x")
    history += [{"role": "assistant", "content": "I wrote src/app.py."}, {"role": "user", "content": "next"}]
    history += tool_step(23, big(23, 400))
    router = Router(scripted_model(fake_llm, retries=0))
    result = asyncio.run(compressor(router, context_window=12_000).maybe_compress(history, MODEL))
    assert result is not None and result.summary_kind == "fallback"
    assert len(fake_llm.requests) == 1  # the failed summary call was really made
    assert "summarized without a model" in result.notice and "summarizer down" in result.notice
    summary = next(m["content"] for m in result.messages if m["content"] and SUMMARY_MARK in m["content"])
    assert "- now fix config.yaml please" in summary
    assert "terminal x2" in summary and "read_file x1" in summary and "write_file x1" in summary
    assert "- config.yaml\n- src/app.py" in summary
    assert 'read_file({"path": "config.yaml"}) · error' in summary
    assert 'terminal({"command": "make test"}) · failed, exit 2' in summary
    assert "## Last assistant text\nI wrote src/app.py." in summary
    assert_valid(result.messages)


def test_a_slow_summary_call_times_out_into_the_fallback(fake_llm: FakeLLM) -> None:
    fake_llm.load([{"text": SUMMARY, "delay": 30}])
    comp = compressor(Router(scripted_model(fake_llm)), context_window=16_000, summary_timeout=0.5)
    result = asyncio.run(comp.maybe_compress(crafted(steps=8, words=200), MODEL))
    assert result is not None and result.summary_kind == "fallback" and "timed out" in result.notice


def test_a_second_compression_replaces_the_first_summary(fake_llm: FakeLLM) -> None:
    fake_llm.load([{"text": SUMMARY}, {"text": "## Goal\n- the merged summary"}])
    router = Router(scripted_model(fake_llm))
    first = asyncio.run(
        compressor(router, context_window=16_000).maybe_compress(crafted(8, words=200), MODEL)
    )
    assert first is not None and first.summary_kind == "model"
    # keep_first=2 would reach into the first summary: the head stops there instead
    comp = compressor(router, context_window=16_000, keep_first=2)
    history = first.messages + [m for n in range(30, 36) for m in tool_step(n, big(n), content=talk(n, 200))]
    second = asyncio.run(comp.maybe_compress(history, MODEL))
    assert second is not None and second.summary_kind == "model"
    summaries = [m for m in second.messages if m["role"] == "user" and m["content"].startswith(SUMMARY_MARK)]
    assert len(summaries) == 1 and summaries[0]["content"].endswith("the merged summary")
    assert SUMMARY in fake_llm.requests[1]["messages"][1]["content"]  # the first summary was summarized
    assert_valid(second.messages)


def test_the_configured_summary_model_is_used(fake_llm: FakeLLM) -> None:
    with FakeLLM([{"text": SUMMARY}]) as aux:
        summary_model = {"name": "openai/summarizer", "api_base": aux.url, "api_key": "k"}
        comp = compressor(
            Router(scripted_model(fake_llm)), context_window=16_000, summary_model=summary_model
        )
        result = asyncio.run(comp.maybe_compress(crafted(steps=8, words=200), MODEL))
        assert result is not None and result.summary_kind == "model"
        assert fake_llm.requests == [] and [r["model"] for r in aux.requests] == ["summarizer"]


def test_token_counts_are_litellms_and_the_window_comes_from_its_model_info() -> None:
    history = crafted(steps=4)
    schemas = [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]
    comp = compressor()
    litellm = _litellm()
    for model in (MODEL, "anthropic/claude-sonnet-4-5"):
        whole = litellm.token_counter(model=model, messages=history, tools=schemas)
        assert abs(comp.count(history, model, schemas) - whole) <= 5
        assert comp.count(history, model, schemas) == comp.count(history, model, schemas)  # from the cache
    assert comp.context_window("anthropic/claude-sonnet-4-5") == 200_000
    assert comp.context_window(MODEL) == DEFAULT_WINDOW  # litellm does not know it
    assert compressor(context_window=5000).context_window("anthropic/claude-sonnet-4-5") == 5000


def test_the_tools_are_counted_once_per_list_and_again_for_another_list_or_model() -> None:
    history = crafted(steps=1)
    one = [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]
    two = one + [{"type": "function", "function": {"name": "u", "description": "x " * 200}}]
    comp = compressor()
    bare = comp.count(history, MODEL, None)
    with_one = comp.count(history, MODEL, one)
    assert with_one > bare and comp.count(history, MODEL, one) == with_one
    with_two = comp.count(history, MODEL, two)  # another list (a conversation's tools rebuilt): recounted
    assert with_two > with_one + 100
    assert comp.count(history, MODEL, one) == with_one and comp.count(history, MODEL, None) == bare
    claude = "anthropic/claude-sonnet-4-5"
    whole = _litellm().token_counter(model=claude, messages=history, tools=two)
    assert abs(comp.count(history, claude, two) - whole) <= 5  # the same list for another model: recounted


def test_settings_read_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HERMETIC_COMPRESSION__THRESHOLD", "0.6")
    monkeypatch.setenv("HERMETIC_COMPRESSION__SUMMARY_MODEL", "openai/gpt-4.1-mini")
    settings = Settings(root=tmp_path)
    assert settings.compression.threshold == 0.6
    assert settings.compression.summary_model is not None
    assert settings.compression.summary_model.name == "openai/gpt-4.1-mini"
    with pytest.raises(ValueError, match="threshold"):
        CompressionSettings(threshold=1.5)


# -- through the agent loop ---------------------------------------------------------------------


def loop_settings(root: Path, url: str) -> Settings:
    """A window that the conversation outgrows after two steps: the trigger level is the system prompt
    and the tool schemas plus 1,000 tokens, whatever their size."""
    settings = settings_for(root, url, backend="local", toolsets=["terminal"])
    probe = Agent(settings)  # the prompt a session really starts with (memory block included)
    system = [{"role": "system", "content": probe.system_prompt()}]
    probe.close()
    schemas = [tool.schema() for tool in TOOLS.select(settings.toolsets).values()]
    base = compressor().count(system, MODEL, schemas)
    return settings.model_copy(
        update={"compression": CompressionSettings(context_window=int((base + 1000) / 0.75))}
    )


def script(steps: int, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """`steps` commands with ~700 tokens of output each, then an answer. Two steps fit; before the third
    model call, shortening the first output is enough; from the fourth on, each call is preceded by a
    summary call (the scripted server answers in order, so those turns are placed where they come)."""
    step = {"tool_calls": [call("terminal", command=WORDS)]}
    return [step] * 3 + [summary, step] * (steps - 3) + [summary, {"text": "all words printed"}]


def main_requests(fake_llm: FakeLLM) -> list[dict[str, Any]]:
    return [r for r in fake_llm.requests if r.get("tools")]


def test_compression_keeps_a_run_going_past_the_window(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = loop_settings(tmp_path, fake_llm.url)
    window = settings.compression.context_window
    assert window is not None
    fake_llm.load(script(8, {"text": SUMMARY}))
    agent = Agent(settings)
    conversation = agent.new_conversation()
    end, events = run(conversation, "print the words eight times")
    assert end.reason == "done" and end.content == "all words printed" and end.iterations == 9

    litellm = _litellm()
    mains = main_requests(fake_llm)
    assert len(mains) == 9 and len(fake_llm.requests) == 15
    sizes = [litellm.token_counter(model=MODEL, messages=r["messages"], tools=r["tools"]) for r in mains]
    assert max(sizes) <= window, sizes  # every model call fit the window
    # the summary calls: no tools, the summarizer's prompt, the middle as text
    summaries = [r for r in fake_llm.requests if not r.get("tools")]
    assert len(summaries) == 6
    assert all("## Open work" in r["messages"][0]["content"] for r in summaries)
    last = mains[-1]["messages"]
    assert last[1] == {"role": "user", "content": "print the words eight times"}  # the head is kept
    assert sum(1 for m in last if m["role"] == "user" and m["content"].startswith(SUMMARY_MARK)) == 1
    notices = [e.message for e in events if e.type == "notice"]
    assert len(notices) == 7 and "tool outputs shortened" in notices[0]
    assert all("summarized by openai/scripted" in n for n in notices[1:])

    # the database has every message, far more than the window
    stored = agent.store.history(conversation.id)
    assert [m["role"] for m in stored] == ["system", "user"] + ["assistant", "tool"] * 8 + ["assistant"]
    assert all(
        m["content"] and not m["content"].startswith(SHORTENED_MARK) for m in stored if m["role"] == "tool"
    )
    # twice the window: the trigger level grows with the terminal tool's schema, the outputs do not
    assert litellm.token_counter(model=MODEL, messages=stored, tools=mains[0]["tools"]) > 2 * window

    # the conversation goes on from the compressed history
    fake_llm.load([{"text": "still here"}])
    assert run(conversation, "are you there?")[0].content == "still here"
    assert fake_llm.requests[0]["messages"][-1] == {"role": "user", "content": "are you there?"}
    agent.close()


def test_a_failing_summary_call_falls_back_and_the_run_goes_on(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = loop_settings(tmp_path, fake_llm.url)  # retries 0: one failed summary request each time
    fake_llm.load(script(5, {"error": 500, "message": "summary model down"}))
    agent = Agent(settings)
    conversation = agent.new_conversation()
    rebuilt: list[str] = []
    conversation.rebuild_system = lambda: rebuilt.append("x") or "REBUILT SYSTEM PROMPT"
    end, events = run(conversation, "print the words five times")
    assert end.reason == "done" and end.iterations == 6
    notices = [e.message for e in events if e.type == "notice"]
    assert sum("summarized without a model" in n and "summary model down" in n for n in notices) == 3
    assert not [e for e in events if e.type == "error"]
    last = main_requests(fake_llm)[-1]["messages"]
    assert last[0] == {"role": "system", "content": "REBUILT SYSTEM PROMPT"} and len(rebuilt) == 4
    summary = next(m["content"] for m in last if m["role"] == "user" and SUMMARY_MARK in m["content"])
    assert "## Tools used\nterminal x" in summary and "## Earlier summary" in summary
    assert len(agent.store.history(conversation.id)) == 2 + 2 * 5 + 1
    agent.close()


def test_an_interrupt_stops_a_slow_summary_call(tmp_path: Path, fake_llm: FakeLLM) -> None:
    settings = loop_settings(tmp_path, fake_llm.url)
    fake_llm.load(script(4, {"text": SUMMARY, "delay": 30}))
    agent = Agent(settings)
    conversation = agent.new_conversation()
    events: list[Event] = []
    ended = 0

    def on_event(event: Event) -> None:
        nonlocal ended
        events.append(event)
        ended += event.type == "tool_end"
        if ended == 3 and event.type == "tool_end":  # the next step starts with the slow summary call
            threading.Timer(0.5, conversation.interrupt).start()

    end = asyncio.run(conversation.run("go", on_event))
    assert end.reason == "interrupted" and not fake_llm.requests[-1].get("tools")
    fake_llm.load([{"text": SUMMARY}, {"text": "back"}])  # still past the threshold: compressed first
    assert run(conversation, "hello again")[0].content == "back"
    agent.close()
