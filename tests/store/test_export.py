"""Trajectory export: a session really recorded (scripted model, real sandbox, real SQLite) round-trips
into each format; the output loads with Hugging Face `datasets`; ChatML renders with a tokenizer's chat
template (transformers, on a tokenizer trained here); every quality filter drops its bad case."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend

from control_plane.agent.agent import Agent
from control_plane.config.settings import Settings, load_settings
from control_plane.safety.redaction import Redactor
from control_plane.store import Store
from control_plane.tools import TOOLS
from control_plane.trajectories import CHATML_TEMPLATE, Quality, Selection, export

SECRET = "sk-ant-" + "a1B2" * 8
ALL_TOOLS = TOOLS.select(sorted(TOOLS.toolsets))


def export_settings(root: Path, model_url: str) -> Settings:
    get_backend("local")
    model = {"name": "openai/scripted", "api_base": model_url, "api_key": "k-123456", "retries": 0}
    return load_settings(root=root, model=model, backend="local", learning={"enabled": False})


COUNTING = [
    {
        "text": "Counting.",
        "tool_calls": [{"name": "terminal", "arguments": {"command": f"echo {SECRET}; seq 3 | wc -l"}}],
    },
    {"text": "<think>wc printed 3</think>There are 3 lines."},
]
"""A terminal call whose output carries a secret, then a final answer with reasoning in its text."""


def record_session(
    settings: Settings, fake_llm: Any, script: list[dict[str, Any]] = COUNTING, title: str = "count lines"
) -> str:
    """A real run of `script` (the scripted model's turns) in a new session; its id."""
    fake_llm.load(script)
    agent = Agent(settings)
    conversation = agent.new_conversation(title=title)
    end = asyncio.run(conversation.run("how many lines does seq 3 print?", lambda e: None))
    conversation.close()
    agent.close()
    assert end.reason == "done"
    return conversation.id


def hermetic(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")} | {
        "HERMETIC_ROOT": str(root)
    }
    return subprocess.run(
        [sys.executable, "-m", "control_plane", *args], capture_output=True, text=True, env=env, timeout=120
    )


def load_jsonl(path: Path, cache: Path) -> Any:
    os.environ["HF_HUB_OFFLINE"] = "1"  # a local file: nothing to fetch
    import datasets

    return datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(cache))


def tiny_chatml_tokenizer(texts: list[str]) -> Any:
    """A real fast tokenizer (BPE trained on `texts`) carrying the ChatML chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
    specials = ["<unk>", "<|im_start|>", "<|im_end|>"]
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=specials))
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", eos_token="<|im_end|>", chat_template=CHATML_TEMPLATE
    )


def test_a_recorded_session_round_trips_into_every_format(tmp_path: Path, fake_llm: Any) -> None:
    settings = export_settings(tmp_path, fake_llm.url)
    session_id = record_session(settings, fake_llm)
    out = {fmt: tmp_path / f"{fmt}.jsonl" for fmt in ("openai", "sharegpt", "chatml")}
    for fmt, path in out.items():
        done = hermetic("sessions", "export", "--format", fmt, "--out", str(path), root=tmp_path)
        assert done.returncode == 0 and "exported 1 trajectories" in done.stderr, done.stderr
    for path in out.values():
        assert SECRET not in path.read_text() and "[REDACTED" in path.read_text()  # always redacted

    with Store(str(settings.database_url)) as store:
        history = store.history(session_id)
    openai = load_jsonl(out["openai"], tmp_path / "hf")
    assert len(openai) == 1 and openai[0]["id"] == session_id
    messages = openai[0]["messages"]
    assert (
        [m["role"] for m in messages]
        == [m["role"] for m in history]
        == ["system", "user", "assistant", "tool", "assistant"]
    )
    call = messages[2]["tool_calls"][0]
    assert call["function"]["name"] == "terminal" and call["id"] == history[2]["tool_calls"][0]["id"]
    assert messages[3]["tool_call_id"] == call["id"] and "3" in messages[3]["content"]
    assert messages[4]["content"] == "<think>wc printed 3</think>There are 3 lines."
    assert [t["function"]["name"] for t in openai[0]["tools"]] == ["terminal"]

    sharegpt = load_jsonl(out["sharegpt"], tmp_path / "hf")[0]["conversations"]
    assert [t["from"] for t in sharegpt] == ["system", "human", "gpt", "tool", "gpt"]
    tool_call = json.loads(sharegpt[2]["value"].split("<tool_call>\n")[1].split("\n</tool_call>")[0])
    assert tool_call["name"] == "terminal" and "seq 3" in tool_call["arguments"]["command"]
    assert (
        sharegpt[3]["value"].startswith("<tool_response>\n") and '"name": "terminal"' in sharegpt[3]["value"]
    )
    assert sharegpt[4]["value"].startswith("<think>wc printed 3</think>")

    chatml = load_jsonl(out["chatml"], tmp_path / "hf")[0]
    tokenizer = tiny_chatml_tokenizer([chatml["text"]])
    rendered = tokenizer.apply_chat_template(chatml["messages"], tokenize=False)
    assert rendered == chatml["text"] and rendered.count("<|im_start|>") == 5
    ids = tokenizer.apply_chat_template(chatml["messages"], tokenize=True)
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") in list(
        ids["input_ids"] if hasattr(ids, "keys") else ids
    )

    md = hermetic("sessions", "export", "--format", "md", root=tmp_path)
    assert md.returncode == 0 and "# count lines" in md.stdout and "**call terminal**" in md.stdout
    assert SECRET not in md.stdout


def test_the_providers_reasoning_is_stored_and_exported_as_think_blocks_and_the_reasoning_field(
    tmp_path: Path, fake_llm: Any
) -> None:
    settings = export_settings(tmp_path, fake_llm.url)
    script = [
        {
            "reasoning": f"I should count them; the key {SECRET} is not mine to print.",
            "tool_calls": [{"name": "terminal", "arguments": {"command": "seq 3 | wc -l"}}],
        },
        {"reasoning": "wc printed 3.", "text": "There are 3 lines."},
    ]
    record_session(settings, fake_llm, script, title="reasoning")
    assert all("reasoning_content" not in m for r in fake_llm.requests for m in r["messages"]), (
        "the reasoning is kept for the record, never sent back to the provider"
    )
    out = {fmt: tmp_path / f"{fmt}.jsonl" for fmt in ("openai", "sharegpt", "chatml")}
    for fmt, path in out.items():
        done = hermetic("sessions", "export", "--format", fmt, "--out", str(path), root=tmp_path)
        assert done.returncode == 0 and SECRET not in path.read_text(), done.stderr

    messages = load_jsonl(out["openai"], tmp_path / "hf")[0]["messages"]
    assert messages[2]["reasoning_content"].startswith("I should count them; the key [REDACTED")
    assert (
        messages[4]["reasoning_content"] == "wc printed 3." and messages[4]["content"] == "There are 3 lines."
    )
    assert all("reasoning_content" not in m for m in messages if m["role"] != "assistant")
    sharegpt = load_jsonl(out["sharegpt"], tmp_path / "hf")[0]["conversations"]
    assert (
        sharegpt[2]["value"].startswith("<think>\nI should count them")
        and "<tool_call>" in sharegpt[2]["value"]
    )
    assert sharegpt[4]["value"] == "<think>\nwc printed 3.\n</think>\nThere are 3 lines."
    chatml = load_jsonl(out["chatml"], tmp_path / "hf")[0]
    assert (
        "<|im_start|>assistant\n<think>\nwc printed 3.\n</think>\nThere are 3 lines.<|im_end|>"
        in chatml["text"]
    )
    md = hermetic("sessions", "export", "--format", "md", root=tmp_path)
    assert "> wc printed 3." in md.stdout and SECRET not in md.stdout


def bad_sessions(store: Store) -> dict[str, str]:
    """One session per filter, each failing only that filter; returns reason -> session id."""

    def turn(*messages: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "system", "content": "s"}, {"role": "user", "content": "do it"}, *messages]

    def call(name: str, i: int = 0) -> dict[str, Any]:
        return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": "{}"}}

    def step(name: str, i: int = 0) -> list[dict[str, Any]]:
        return [
            {"role": "assistant", "content": None, "tool_calls": [call(name, i)]},
            {"role": "tool", "tool_call_id": f"c{i}", "name": name, "content": "ok"},
        ]

    cases = {
        "good": turn(*step("terminal"), {"role": "assistant", "content": "Done."}),
        "budget": turn(*step("terminal", 0), *step("terminal", 1), *step("terminal", 2)),
        "incomplete": turn(*step("terminal")),
        "empty_final": turn(*step("terminal"), {"role": "assistant", "content": "  "}),
        "unknown_tool": turn(*step("teleport"), {"role": "assistant", "content": "Done."}),
        "unclosed": turn(*step("terminal"), {"role": "assistant", "content": "<think>hmm... Done."}),
        "fence": turn(*step("terminal"), {"role": "assistant", "content": "```python\nprint(1)\nDone."}),
        "few_tool_calls": turn({"role": "assistant", "content": "Done without tools."}),
        "failed_tools": turn(*step("terminal"), {"role": "assistant", "content": "Done."}),
    }
    ids: dict[str, str] = {}
    for reason, messages in cases.items():
        session = store.create_session("default", title=reason)
        store.add_messages(session.id, messages)
        ok = reason != "failed_tools"
        for message in messages:
            for c in message.get("tool_calls") or []:
                store.record_tool_call(
                    session.id, call_id=c["id"], tool=c["function"]["name"], arguments={}, backend=None,
                    sandbox_id=None, started_at=0.0, duration_ms=1.0, exit_code=0 if ok else 1, ok=ok,
                )  # fmt: skip
        ids[reason] = session.id
    return ids


def test_each_quality_filter_drops_its_bad_case_and_is_counted(store: Store) -> None:
    ids = bad_sessions(store)

    def run(**options: Any) -> tuple[list[str], dict[str, int]]:
        quality = Quality(known_tools=set(ALL_TOOLS), max_iterations=3, **options)
        out = io.StringIO()
        export(store, "default", Selection(), "openai", out, quality, Redactor(), {})
        return [json.loads(line)["id"] for line in out.getvalue().splitlines()], quality.report()

    kept, report = run(min_tool_calls=1, only_success=True)
    assert kept == [ids["good"]]
    assert report == {
        "kept": 1, "budget": 1, "incomplete": 1, "empty_final": 1, "unknown_tool": 1, "unclosed": 2,
        "few_tool_calls": 1, "failed_tools": 1,
    }  # fmt: skip
    # the opt-in filters are off by default; each default one can be turned off
    kept, report = run()
    assert set(kept) == {ids["good"], ids["few_tool_calls"], ids["failed_tools"]}
    kept, _ = run(checks={"budget", "incomplete", "empty_final", "unknown_tool"})
    assert ids["unclosed"] in kept and ids["fence"] in kept
    # a selection narrows what is read
    out = io.StringIO()
    quality = Quality(known_tools=set(ALL_TOOLS), max_iterations=3)
    export(
        store,
        "default",
        Selection(ids=[ids["good"], ids["budget"]]),
        "sharegpt",
        out,
        quality,
        Redactor(),
        {},
    )
    assert [json.loads(line)["id"] for line in out.getvalue().splitlines()] == [ids["good"]]
    assert quality.report() == {"kept": 1, "budget": 1}


def test_export_refuses_bad_options_with_the_reason(tmp_path: Path) -> None:
    for args, message in [
        (("--format", "yaml"), "unknown format"),
        (("--since", "last tuesday"), "--since"),
        (("--keep", "nonsense"), "unknown filter"),
    ]:
        done = hermetic("sessions", "export", *args, root=tmp_path)
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("fmt", ["sharegpt", "chatml", "openai"])
def test_an_empty_profile_exports_nothing_and_says_so(tmp_path: Path, fmt: str) -> None:
    done = hermetic("sessions", "export", "--format", fmt, root=tmp_path)
    assert done.returncode == 0 and done.stdout == "" and "exported 0 trajectories" in done.stderr


def test_a_selection_by_source_and_time_exports_only_those_sessions(store: Store) -> None:
    from control_plane.trajectories import parse_since

    done = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    made = {}
    for source in ("cli", "cron", "cron"):
        session = store.create_session("default", source=source)
        store.add_messages(session.id, done)
        made.setdefault(source, []).append(session.id)
    other = store.create_session("someone-else", source="cron")
    store.add_messages(other.id, done)

    def ids(selection: Selection) -> list[str]:
        out = io.StringIO()
        export(
            store,
            "default",
            selection,
            "chatml",
            out,
            Quality(known_tools=set(), max_iterations=90),
            Redactor(),
            {},
        )
        return [json.loads(line)["id"] for line in out.getvalue().splitlines()]

    assert ids(Selection(sources=["cron"])) == made["cron"]  # oldest first; another profile's never
    assert ids(Selection()) == made["cli"] + made["cron"]
    assert ids(Selection(since=parse_since("1h"))) == made["cli"] + made["cron"]
    assert ids(Selection(since=parse_since("2999-01-01"))) == []
    with pytest.raises(ValueError, match="--since"):
        parse_since("next week")
