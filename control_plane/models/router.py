"""The model router: one call to the configured model, with retries and a fallback chain.

The call goes through litellm, or for an OpenAI-compatible server (`openai/NAME` with an api_base)
straight through the openai SDK underneath it (models/openai_wire.py says why).

Each model in the chain (the primary, then the fallbacks) gets `retries` more attempts on transient
errors (rate limits, timeouts, connection errors, 5xx) with exponential backoff and jitter; any other
error, or the retries running out, moves on to the next model. Every retry and fallback is announced
as a Notice, every answered call as a Usage. litellm is imported on first use: it takes seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from types import ModuleType
from typing import Any

from pydantic import BaseModel
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from ..config.settings import ModelEndpoint, ModelSettings
from ..events import Event, Notice, ReasoningDelta, TextDelta, Usage
from . import openai_wire

Emit = Callable[[Event], None]
FIRST_CHUNK_PASSES = 2
"""Event-loop passes given after a stream's first text delta, before the rest of a buffered burst is
read: one for a surface's sender task, one for the transport's writer behind it (ACP: the turn's drain,
then the SDK's send loop). Only the first: the rest of a burst then reaches followers as one batch."""

HOW_TO_CONFIGURE = """No model is configured. Set one in any of these ways:
  - the environment: HERMETIC_MODEL__NAME=anthropic/claude-sonnet-4-5 (and its key, ANTHROPIC_API_KEY=...)
  - the model: block of ~/.hermetic/config.yaml:
        model:
          name: anthropic/claude-sonnet-4-5
  - the command line: --model anthropic/claude-sonnet-4-5
A local OpenAI-compatible server (Ollama, vLLM, llama.cpp) needs its URL:
  HERMETIC_MODEL__NAME=ollama_chat/qwen3 HERMETIC_MODEL__API_BASE=http://localhost:11434
  HERMETIC_MODEL__NAME=openai/NAME HERMETIC_MODEL__API_BASE=http://localhost:8000/v1 \\
    HERMETIC_MODEL__API_KEY=any"""


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str
    """The raw JSON text as the model sent it; it may be malformed."""


class ModelReply(BaseModel):
    content: str
    reasoning: str = ""
    """What the provider sent as `reasoning_content` (a reasoning model's thinking), kept for the
    session's record and trajectory exports; never sent back to the model."""
    tool_calls: list[ToolCall]
    model: str
    """The model of the chain that answered, as configured."""
    finish_reason: str | None
    usage: Usage


class ModelError(Exception):
    """No model of the chain answered; the message lists each model and why."""


class ModelNotConfigured(ModelError):
    """No model is set; the message says how to set one."""

    def __init__(self) -> None:
        super().__init__(HOW_TO_CONFIGURE)


class Router:
    def __init__(self, settings: ModelSettings):
        self.settings = settings

    def problems(self) -> list[str]:
        """What keeps the configured models from being called, found without a network call."""
        if not self.settings.chain:
            return [HOW_TO_CONFIGURE]
        return [
            f"{endpoint.name}: {problem}"
            for endpoint in self.settings.chain
            if (problem := _problem(endpoint))
        ]

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        emit: Emit | None = None,
        stream: bool = True,
    ) -> ModelReply:
        """The reply of the first model of the chain that answers; ModelError when none does."""
        chain = self.settings.chain
        if not chain:
            raise ModelNotConfigured()
        emit = emit or _ignore
        failures: list[str] = []
        for position, endpoint in enumerate(chain):
            attempt = _Attempt(self.settings, endpoint, messages, tools, emit, stream)
            try:
                problem = _problem(endpoint)
                if problem:
                    raise _Misconfigured(problem)
                return await attempt.run()
            except Exception as exc:
                reason = _reason(exc)
                failures.append(f"{endpoint.name}: {reason}")
                if position + 1 < len(chain):
                    restart = "; the reply restarts" if attempt.emitted_text else ""
                    next_name = chain[position + 1].name
                    emit(Notice(message=f"{endpoint.name} failed ({reason}); trying {next_name}{restart}"))
        raise ModelError("No model answered:\n" + "\n".join(f"  - {failure}" for failure in failures))


class _Misconfigured(Exception):
    """A model that cannot be called as configured (its message is the problem and the fix)."""


class _Attempt:
    """Calls to one model of the chain: the first try and its retries."""

    def __init__(
        self,
        settings: ModelSettings,
        endpoint: ModelEndpoint,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        emit: Emit,
        stream: bool,
    ):
        self.settings = settings
        self.endpoint = endpoint
        self.emit = emit
        self.stream = stream
        self.emitted_text = False
        """Whether this try streamed text out already (a retry or fallback then restarts the reply)."""
        self.api_key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
        self.request: dict[str, Any] = {"messages": messages}
        if tools:
            self.request["tools"] = tools
        if settings.temperature is not None:
            self.request["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            self.request["max_tokens"] = settings.max_tokens

    async def _create(self) -> Callable[..., Awaitable[Any]]:
        """What sends the request: the openai SDK for an OpenAI-compatible server, else litellm."""
        if openai_wire.speaks_openai(self.endpoint):
            return await openai_wire.create(self.endpoint, self.api_key, self.settings.timeout)
        # the first import takes seconds of CPU: never on the event loop, which serves every other chat
        litellm = _litellm() if _loaded else await asyncio.to_thread(_litellm)
        return partial(
            litellm.acompletion,
            model=self.endpoint.name,
            api_base=self.endpoint.api_base,
            api_key=self.api_key,
            timeout=self.settings.timeout,
            num_retries=0,  # one retry policy: ours. litellm's own and the openai client's are off
            max_retries=0,
            drop_params=True,  # temperature & co. are dropped for models that do not take them
        )

    async def run(self) -> ModelReply:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.settings.retries + 1),
            # jitter scaled to the backoff (tenacity's default adds up to a whole second)
            wait=wait_exponential_jitter(
                multiplier=self.settings.backoff, max=self.settings.backoff_max, jitter=self.settings.backoff
            ),
            retry=retry_if_exception(_transient),
            before_sleep=self._announce_retry,
            reraise=True,
        )
        reply: ModelReply = await retrying(self._call)
        return reply

    def _announce_retry(self, state: RetryCallState) -> None:
        assert state.outcome is not None and state.next_action is not None
        restart = "; the reply restarts" if self.emitted_text else ""
        self.emitted_text = False
        reason = _reason(state.outcome.exception())
        retry = f"retry {state.attempt_number} of {self.settings.retries} in {state.next_action.sleep:.1f}s"
        self.emit(Notice(message=f"{self.endpoint.name}: {reason}; {retry}{restart}"))

    async def _call(self) -> ModelReply:
        create = await self._create()
        if not self.stream:
            response = await create(**self.request)
            choice = response.choices[0]
            calls = [
                ToolCall(id=call.id, name=call.function.name or "", arguments=call.function.arguments or "")
                for call in choice.message.tool_calls or []
            ]
            thought = getattr(choice.message, "reasoning_content", None) or ""
            return self._reply(
                choice.message.content or "", calls, choice.finish_reason, response.usage, thought
            )
        stream = await create(**self.request, stream=True, stream_options={"include_usage": True})
        text: list[str] = []
        reasoning: list[str] = []
        calls_by_index: dict[int, dict[str, str]] = {}
        finish_reason = usage = None
        try:
            async for chunk in stream:
                usage = getattr(chunk, "usage", None) or usage
                if not chunk.choices:
                    continue
                choice = chunk.choices[0]
                finish_reason = choice.finish_reason or finish_reason
                if thought := getattr(choice.delta, "reasoning_content", None):
                    reasoning.append(thought)
                    self.emit(ReasoningDelta(text=thought))
                if choice.delta.content:
                    text.append(choice.delta.content)
                    first, self.emitted_text = not self.emitted_text, True
                    self.emit(TextDelta(text=choice.delta.content))
                    if first:  # buffered chunks are read without suspending: let the first out now
                        for _ in range(FIRST_CHUNK_PASSES):
                            await asyncio.sleep(0)
                for delta in choice.delta.tool_calls or []:
                    call = calls_by_index.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] = delta.id or call["id"]
                    if delta.function is not None:
                        call["name"] += delta.function.name or ""
                        call["arguments"] += delta.function.arguments or ""
        finally:  # also on cancel: the HTTP connection goes back to the pool, or is closed
            await stream.aclose()
        calls = [ToolCall(**calls_by_index[index]) for index in sorted(calls_by_index)]
        return self._reply("".join(text), calls, finish_reason, usage, "".join(reasoning))

    def _reply(
        self, content: str, calls: list[ToolCall], finish_reason: str | None, usage: Any, reasoning: str
    ) -> ModelReply:
        prompt = getattr(usage, "prompt_tokens", 0) or 0
        completion = getattr(usage, "completion_tokens", 0) or 0
        record = Usage(
            model=self.endpoint.name,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost=_cost(self.endpoint.name, prompt, completion),
        )
        self.emit(record)
        return ModelReply(
            content=content,
            reasoning=reasoning,
            tool_calls=calls,
            model=self.endpoint.name,
            finish_reason=finish_reason,
            usage=record,
        )


def _ignore(event: Event) -> None:
    pass


_loaded: list[ModuleType] = []


def _litellm() -> ModuleType:
    """litellm, imported on first use, offline and quiet."""
    if not _loaded:
        # its bundled price list instead of fetching one from GitHub on import (slow, and offline fails)
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import aiohttp.connector
        import aiohttp.resolver
        import litellm

        # With aiodns installed (slixmpp needs it) aiohttp resolves through pycares, which opens an
        # inotify instance and a thread per resolver; litellm's sessions are never closed, and the
        # instances (128 per user on Debian, shared with every sandbox's file watches) ran out.
        aiohttp.connector.DefaultResolver = aiohttp.resolver.ThreadedResolver  # type: ignore[misc]

        litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" and "Provider List" prints
        # litellm logs each failed call with its own handler; the router reports failures itself.
        # (Its telemetry is the proxy's, opt-in; the SDK sends none.)
        for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        _loaded.append(litellm)
    return _loaded[0]


def warm_up() -> None:
    """Import the openai SDK and litellm now (seconds of CPU): a server calls this in a thread at
    startup, so its first turn does not hold the event loop, and every request with it, for that long."""
    openai_wire.warm_up()
    _litellm()


def _problem(endpoint: ModelEndpoint) -> str | None:
    """Why this model cannot be called as configured (unknown provider, missing key), else None."""
    litellm = _litellm()
    try:
        litellm.get_llm_provider(endpoint.name, api_base=endpoint.api_base)
    except Exception:
        return (
            "unknown model or provider; name it as litellm does, PROVIDER/MODEL "
            "(anthropic/claude-sonnet-4-5, openai/gpt-4.1, ollama_chat/qwen3 with an api_base, "
            "openai/NAME with the api_base of an OpenAI-compatible server)"
        )
    api_key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
    found = litellm.validate_environment(endpoint.name, api_key=api_key, api_base=endpoint.api_base)
    if found["keys_in_environment"]:
        return None
    missing = " and ".join(found["missing_keys"])
    local = " (any value for a local server that needs none)" if endpoint.api_base else ""
    return (
        f"no API key: set {missing}, or api_key for this model in the model: block of "
        f"config.yaml (HERMETIC_MODEL__API_KEY for the primary){local}"
    )


def _transient(exc: BaseException) -> bool:
    """Worth retrying the same model: rate limits, timeouts, dropped connections, server errors."""
    # litellm's errors are subclasses of the openai SDK's: this covers both ways of calling (and the SDK
    # is imported by then: a call made through either imports it)
    openai = sys.modules.get("openai")
    if openai is not None and isinstance(exc, openai.RateLimitError | openai.APIConnectionError):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and status >= 500


_LITELLM_PREFIXES = re.compile(r"^((litellm\.)?\w+(Error|Exception): |\w+Exception - )+")


def _reason(exc: BaseException | None) -> str:
    """A one-line account of a failed call: the error's kind, HTTP status and the provider's message."""
    if isinstance(exc, _Misconfigured):
        return str(exc)
    message = _provider_message(exc).strip().splitlines()
    status = getattr(exc, "status_code", None)
    kind = type(exc).__name__ + (f" {status}" if isinstance(status, int) else "")
    return f"{kind}: {message[0][:300]}" if message else kind


def _provider_message(exc: BaseException | None) -> str:
    """The message in the provider's error body (OpenAI's `{"error": {"message": ...}}`), else the
    exception's own without litellm's prefixes."""
    body = getattr(exc, "body", None)
    error = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"].strip():
        return str(error["message"])
    return _LITELLM_PREFIXES.sub("", str(getattr(exc, "message", None) or exc))


def _cost(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """US dollars by litellm's price list; None for a model it has no price for."""
    try:
        prompt_cost, completion_cost = _litellm().cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:
        return None
    return float(prompt_cost + completion_cost)


__all__ = ["ModelError", "ModelNotConfigured", "ModelReply", "Router", "ToolCall"]
