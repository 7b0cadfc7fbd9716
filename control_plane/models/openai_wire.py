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
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..config.settings import ModelEndpoint
from ..tls import model_tls

if TYPE_CHECKING:
    import openai

PREFIX = "openai/"

ClientKey = tuple[str, str, float]
"""A server, a key and a timeout."""


class _LoopClients:
    """The clients of one event loop (a client's connection pool belongs to the loop it was made on),
    closed with the loop: `closer` is an async generator started on the loop, and asyncio.run (uvicorn's
    too) closes a loop's async generators before the loop itself, which runs its `finally`."""

    def __init__(self) -> None:
        self.clients: dict[ClientKey, openai.AsyncOpenAI] = {}
        self.closer = self._close_at_shutdown()  # held here: the loop keeps only a weak reference

    async def _close_at_shutdown(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for client in list(self.clients.values()):
                await client.close()
            self.clients.clear()


_loops: dict[asyncio.AbstractEventLoop, _LoopClients] = {}
"""Not a WeakKeyDictionary: a client's connections refer to their loop, which would keep both forever."""
_loops_lock = threading.Lock()

# the SDK's HTTP client logs every request at INFO: a line per model call in the server's log
logging.getLogger("httpx2").setLevel(logging.WARNING)


def speaks_openai(endpoint: ModelEndpoint) -> bool:
    """Whether calls to `endpoint` go through the openai SDK rather than litellm."""
    if endpoint.client == "litellm":
        return False
    return bool(endpoint.api_base) and endpoint.name.startswith(PREFIX)


async def create(
    endpoint: ModelEndpoint, api_key: str | None, timeout: float
) -> Callable[..., Awaitable[Any]]:
    """A chat completion call on the running loop's client for this server, taking `chat.completions
    .create`'s arguments, the model named as the server knows it; retries off (the router has its own)."""
    assert endpoint.api_base is not None
    key = api_key or os.environ.get("OPENAI_API_KEY", "")  # the key litellm would send (the router checked)
    on_loop, which = await _loop_clients(), (endpoint.api_base, key, timeout)
    found = on_loop.clients.get(which)
    if found is None:
        sdk = _sdk() if "openai" in sys.modules else await asyncio.to_thread(_sdk)
        http = sdk.DefaultAsyncHttpxClient(verify=model_tls(), timeout=timeout)
        found = sdk.AsyncOpenAI(
            base_url=endpoint.api_base, api_key=key, timeout=timeout, max_retries=0, http_client=http
        )
        on_loop.clients[which] = found
    return partial(_post, found, endpoint.name.removeprefix(PREFIX))


async def _post(client: openai.AsyncOpenAI, model: str, *, stream: bool = False, **body: Any) -> Any:
    """POST /chat/completions with the body as given (the SDK's documented way for a raw body), typed
    replies as `create` returns them. `create` would first walk the request against its parameter
    types, every message of the history each call (6% of a loaded API server's CPU); the history is
    already JSON in OpenAI's format, which is what that walk produces."""
    sdk = _sdk()  # imported by the client's making
    body = {"model": model, **body, "stream": stream}
    completion = sdk.types.chat.ChatCompletion
    if stream:
        chunks = sdk.AsyncStream[sdk.types.chat.ChatCompletionChunk]
        return await client.post(
            "/chat/completions", body=body, cast_to=completion, stream=True, stream_cls=chunks
        )
    return await client.post("/chat/completions", body=body, cast_to=completion)


def _sdk() -> ModuleType:
    """The openai SDK, imported on first use: its types take half a second of every process's start-up
    (the CLI's included) that never calls a model."""
    import openai

    return openai


async def _loop_clients() -> _LoopClients:
    loop = asyncio.get_running_loop()
    with _loops_lock:  # loops of other threads (a session's own, a test's) look up at the same time
        for closed in [other for other in _loops if other.is_closed()]:
            del _loops[closed]  # clients of a loop closed without closing its generators: left to the GC
        found, new = _loops.get(loop), False
        if found is None:
            found, new = _LoopClients(), True
            _loops[loop] = found
    if new:
        await anext(found.closer)  # started on this loop, so the loop closes it
    return found


def warm_up() -> None:
    """Import the SDK now (a server's start-up, in a thread), not on the first call."""
    _sdk()
