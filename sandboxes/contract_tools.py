"""The calls behind the agent's interactive tools, declared as `sandboxes/contract.py` declares the
runtime's core ones: browser, terminals, scripts (execute_code) and the python kernel."""

from typing import Any, Literal, Optional, TypedDict


class CallEvent(TypedDict):
    """script.start / script.reply answer: the script calls a tool and waits for its result."""

    event: Literal["call"]
    run: str
    name: str
    arguments: dict[str, Any]


class DoneEvent(TypedDict):
    """script.start / script.reply answer: the script has ended (its process and what it started)."""

    event: Literal["done"]
    run: str
    output: str
    truncated: bool
    exit_code: Optional[int]
    timed_out: bool
    cancelled: bool
    problem: str
    """Why the runtime stopped it, when the script broke the stub's protocol; else empty."""


class CallReply(TypedDict, total=False):
    """script.reply's `result`: what the script's call returns (or raises: refused, spent)."""

    ok: bool
    content: str
    exit_code: Optional[int]
    spent: bool
    refused: bool
