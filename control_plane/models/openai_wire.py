"""Calls to an OpenAI-compatible server (`openai/NAME` with an api_base: vLLM, llama.cpp, LM Studio,
Ollama's /v1, the scripted server) with the openai SDK instead of through litellm.

Both end in the same openai client over HTTP; litellm adds, per streamed call, 10-13 ms of CPU on top of
the SDK's 2-3 ms (a cost lookup in its price table, a logging payload, each chunk rebuilt into its own
types, a success handler on a thread): more than a small local model takes to its first token, and
on the event loop that serves every other session. The history is already in OpenAI's format (litellm's
own), and the chunks and replies the SDK returns have the attributes the router reads from litellm's.
Hosted providers, `openai/` without an api_base included, stay with litellm: it knows their quirks
(parameters a model refuses, other wire formats, price lists).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import openai

from ..config.settings import ModelEndpoint

PREFIX = "openai/"

_clients: dict[asyncio.AbstractEventLoop, dict[tuple[str, str, float], openai.AsyncOpenAI]] = {}
"""One client per server, key and timeout on each event loop: its connection pool belongs to the loop.
(Not a WeakKeyDictionary: a client's connections refer to their loop, which would keep both forever.)"""
_clients_lock = threading.Lock()

# the SDK's HTTP client logs every request at INFO: a line per model call in the server's log
logging.getLogger("httpx2").setLevel(logging.WARNING)


def speaks_openai(endpoint: ModelEndpoint) -> bool:
    """Whether calls to `endpoint` go through the openai SDK rather than litellm."""
    if endpoint.client == "litellm":
        return False
    return bool(endpoint.api_base) and endpoint.name.startswith(PREFIX)


def create(endpoint: ModelEndpoint, api_key: str | None, timeout: float) -> Callable[..., Awaitable[Any]]:
    """`chat.completions.create` of the running loop's client for this server, the model named as the
    server knows it; retries off (the router has its own policy)."""
    assert endpoint.api_base is not None
    on_loop = _loop_clients(asyncio.get_running_loop())
    key = api_key or os.environ.get("OPENAI_API_KEY", "")  # the key litellm would send (the router checked)
    found = on_loop.get((endpoint.api_base, key, timeout))
    if found is None:
        found = openai.AsyncOpenAI(base_url=endpoint.api_base, api_key=key, timeout=timeout, max_retries=0)
        on_loop[(endpoint.api_base, key, timeout)] = found
    return partial(found.chat.completions.create, model=endpoint.name.removeprefix(PREFIX))


def _loop_clients(loop: asyncio.AbstractEventLoop) -> dict[tuple[str, str, float], openai.AsyncOpenAI]:
    with _clients_lock:  # loops of other threads (a session's own, a test's) look up at the same time
        for closed in [other for other in _clients if other.is_closed()]:
            del _clients[closed]  # its connections cannot be used again; their sockets close when collected
        return _clients.setdefault(loop, {})
