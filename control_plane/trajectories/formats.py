"""A trajectory in each export format: ShareGPT and ChatML (tool calls as Hermes-style <tool_call> and
<tool_response> blocks), OpenAI chat (tool calls as the API has them), and Markdown for reading.

Reasoning the model wrote as <think>...</think> stays in the text as it was given; reasoning the provider
sent apart (`reasoning_content`) becomes a <think> block before the reply in ShareGPT and ChatML, and stays
the message's `reasoning_content` field in the OpenAI format.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .reader import Trajectory

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""The ChatML chat template (Jinja, as tokenizers carry it); it renders a chatml line's messages."""
SHAREGPT_ROLES = {"system": "system", "user": "human", "assistant": "gpt", "tool": "tool"}


def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return text


def _assistant_text(message: dict[str, Any]) -> str:
    """The reasoning as a <think> block, the reply's text, then one <tool_call> block per call (Hermes
    function-calling format)."""
    parts = [f"<think>\n{message['reasoning_content']}\n</think>"] if message.get("reasoning_content") else []
    parts += [message["content"]] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        body = json.dumps(
            {"name": function.get("name"), "arguments": _arguments(function.get("arguments", ""))}
        )
        parts.append(f"<tool_call>\n{body}\n</tool_call>")
    return "\n".join(parts)


def _tool_text(message: dict[str, Any]) -> str:
    body = json.dumps(
        {"name": message.get("name"), "content": message.get("content") or ""}, ensure_ascii=False
    )
    return f"<tool_response>\n{body}\n</tool_response>"


def _text_turns(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, text) turns; consecutive tool results (one batch) form one tool turn."""
    turns: list[tuple[str, str]] = []
    for message in messages:
        role = message["role"]
        if role == "assistant":
            text = _assistant_text(message)
        elif role == "tool":
            text = _tool_text(message)
            if turns and turns[-1][0] == "tool":
                turns[-1] = ("tool", turns[-1][1] + "\n" + text)
                continue
        else:
            text = message.get("content") or ""
        turns.append((role, text))
    return turns


def _meta(t: Trajectory) -> dict[str, Any]:
    """Who the trajectory is; an evaluation attempt's also its task, attempt and reward."""
    meta = {"id": t.session.id, "source": t.session.source, "model": t.session.model}
    return {**meta, **t.extra.get("eval", {})}


def sharegpt(t: Trajectory, tools: dict[str, Any]) -> dict[str, Any]:
    turns = [{"from": SHAREGPT_ROLES[role], "value": text} for role, text in _text_turns(t.messages)]
    return {**_meta(t), "conversations": turns}


def chatml(t: Trajectory, tools: dict[str, Any]) -> dict[str, Any]:
    messages = [{"role": role, "content": text} for role, text in _text_turns(t.messages)]
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return {**_meta(t), "messages": messages, "text": text}


def openai(t: Trajectory, tools: dict[str, Any]) -> dict[str, Any]:
    """The messages as the chat API takes them, and the schemas of the tools they call."""
    used = {c["function"]["name"] for m in t.messages for c in m.get("tool_calls") or []}
    return {
        **_meta(t),
        "messages": t.messages,
        "tools": [tools[name] for name in sorted(used) if name in tools],
    }


def rl(t: Trajectory, tools: dict[str, Any]) -> dict[str, Any]:
    """One attempt for training on rewards: the whole conversation with its tools (`messages`, `tools`),
    split as TRL's conversational prompt-completion (`prompt` up to the task, `completion` the agent's
    work) with `label` (passed) for its unpaired-preference (KTO) trainer, and the verifier's `reward`."""
    first_user = next((i for i, m in enumerate(t.messages) if m["role"] == "user"), len(t.messages) - 1)
    label = t.extra.get("eval", {})
    return {
        **openai(t, tools),
        "reward": label.get("reward"),
        "label": label.get("passed"),
        "prompt": t.messages[: first_user + 1],
        "completion": t.messages[first_user + 1 :],
    }


def markdown(t: Trajectory) -> str:
    lines = [f"# {t.session.title or t.session.id}", "", f"`{t.session.id}` · {t.session.source}", ""]
    for message in t.messages:
        role = message["role"]
        if role == "tool":
            lines += [
                f"**tool {message.get('name') or ''}**",
                "",
                "```",
                message.get("content") or "",
                "```",
                "",
            ]
            continue
        if message.get("reasoning_content"):
            lines += [
                f"**{role} (thinking)**",
                "",
                *(f"> {line}" for line in message["reasoning_content"].splitlines()),
                "",
            ]
        if message.get("content"):
            lines += [f"**{role}**", "", message["content"], ""]
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            lines += [
                f"**call {function.get('name')}**",
                "",
                "```json",
                function.get("arguments", ""),
                "```",
                "",
            ]
    return "\n".join(lines)


FORMATS: dict[str, Callable[[Trajectory, dict[str, Any]], dict[str, Any]]] = {
    "sharegpt": sharegpt,
    "chatml": chatml,
    "openai": openai,
    "rl": rl,
}
