"""A scripted OpenAI-compatible chat server: replays a list of turns, one per request, in order.

Tests, the demo and benchmarks run it in a thread (`FakeLLM(turns).start()`); users run it with
`hermetic dev fake-llm --script FILE`. litellm reaches it as `openai/ANY_NAME` with `api_base=server.url`.

A stdlib ThreadingHTTPServer rather than uvicorn: no event loop to share with the caller's, starts and
stops in milliseconds from any thread, and answers a request in well under a millisecond, which keeps
it out of the figures when a benchmark measures the agent's own overhead.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from . import fake_embeddings

ARGUMENT_PIECE = 16
"""Characters of tool-call arguments per stream chunk, so arguments arrive split as OpenAI sends them."""


class ScriptedToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    arguments: dict[str, Any] | str = {}
    """A dict is sent as JSON text; a string is sent verbatim (to test malformed arguments)."""

    @property
    def arguments_text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


class Turn(BaseModel):
    """The answer to one request: a reply (text and/or tool calls) or an HTTP error."""

    model_config = ConfigDict(extra="forbid")

    text: str | None = None
    reasoning: str | None = None
    """The model's reasoning, sent as `reasoning_content` before the text (as DeepSeek, vLLM and other
    OpenAI-compatible servers of reasoning models do)."""
    tool_calls: list[ScriptedToolCall] = []
    error: int | None = Field(None, ge=400, le=599)
    """Answer with this HTTP status instead of a reply."""
    message: str | None = None
    """The error's message."""
    delay: float = Field(0.0, ge=0)
    """Seconds to wait before answering."""
    pace: float = Field(0.0, ge=0)
    """Seconds between a stream's chunks (0: the whole stream in one write), for consumers of deltas."""
    match: str | None = None
    """Answer only a request whose first user message contains this text; requests take the first turn
    of the script not yet used that fits them. Lets agents running in parallel (a delegate call's
    children) each follow their own part of the script."""
    drop: bool = False
    """Drop the connection mid-reply (a provider failing): after half of a stream's chunks, or, when not
    streaming, before any answer."""

    @model_validator(mode="after")
    def _reply_or_error(self) -> Turn:
        if self.error is not None and (self.text is not None or self.tool_calls):
            raise ValueError("a turn is either an error or a reply (text, tool_calls), not both")
        if self.message is not None and self.error is None:
            raise ValueError("'message' goes with 'error'")
        if self.drop and self.error is not None:
            raise ValueError("'drop' goes with a reply, not an error")
        return self


_turns = TypeAdapter(list[Turn])


class ScriptError(ValueError):
    """A script file that cannot be read or is not a list of turns; the message says where."""


def parse_turns(turns: Iterable[Turn | dict[str, Any]]) -> list[Turn]:
    return _turns.validate_python(list(turns))


def load_script(path: Path) -> list[Turn]:
    """The turns of a YAML or JSON script file."""
    try:
        data = yaml.safe_load(path.read_text())  # YAML is a superset of JSON
    except (OSError, yaml.YAMLError) as exc:
        raise ScriptError(f"cannot read the script {path}: {exc}") from exc
    if not isinstance(data, list):
        raise ScriptError(f"{path}: a script is a list of turns (- text: ..., - error: 429, ...)")
    try:
        return parse_turns(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            turn, *field = error["loc"]
            where = f"turn {int(turn) + 1}" + (f" {'.'.join(map(str, field))}" if field else "")
            problems.append(f"  {where}: {error['msg']}")
        raise ScriptError(f"{path}: not a valid script:\n" + "\n".join(problems)) from exc


def rough_tokens(text: str) -> int:
    return max(1, len(text) // 4)


class FakeLLM:
    """The scripted server. `url` is its api_base; `requests` holds the JSON bodies it received, in order."""

    def __init__(
        self,
        turns: Iterable[Turn | dict[str, Any]] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        require_key: str | None = None,
    ):
        self._turns = parse_turns(turns)
        self._used: set[int] = set()
        self.require_key = require_key
        """When set, a request without `Authorization: Bearer <this>` gets the 401 a provider sends."""
        self._lock = threading.Lock()
        self._asked = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self.requests: list[dict[str, Any]] = []
        self.embedding_requests: list[dict[str, Any]] = []
        """The bodies /v1/embeddings received (deterministic vectors: fake_embeddings.py)."""
        self.embeddings_down = False
        """When set, /v1/embeddings answers 503, as a provider that is down does."""
        self.timeline: list[tuple[float, float]] = []
        """(received, last token sent) per streamed reply, in time.perf_counter() (for benchmarks)."""
        self._httpd = _Server((host, port), _Handler)
        self._httpd.fake = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> FakeLLM:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-llm", daemon=True
        )
        self._thread.start()
        return self

    def load(self, turns: Iterable[Turn | dict[str, Any]]) -> None:
        """Replace the script and forget the requests received so far."""
        parsed = parse_turns(turns)
        with self._lock:
            self._turns = parsed
            self._used = set()
            self.requests = []
            self.timeline = []

    def wait_requests(self, count: int, timeout: float = 120.0) -> list[dict[str, Any]]:
        """Wait until `count` requests have come (woken by each one, never polled); the requests."""
        with self._asked:
            if not self._asked.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(f"{len(self.requests)} of {count} model requests within {timeout} s")
            return list(self.requests)

    def stop(self) -> None:
        """Stop serving, wake delayed answers and drop open connections (their clients see them close)."""
        self._stopping.set()
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
        with self._lock:
            for conn in self._connections:
                with contextlib.suppress(OSError):  # already closed by the client
                    conn.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self, body: dict[str, Any]) -> tuple[int, Turn | None]:
        """Record the request; its number (from 1) and its turn, None when the script is exhausted."""
        first_user = next((m.get("content") for m in body.get("messages", []) if m.get("role") == "user"), "")
        with self._lock:
            self.requests.append(body)
            self._asked.notify_all()
            number = len(self.requests)
            for index, turn in enumerate(self._turns):
                if index not in self._used and (turn.match is None or turn.match in str(first_user)):
                    self._used.add(index)
                    return number, turn
            return number, None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeLLM


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real providers do; streams use chunked encoding
    disable_nagle_algorithm = True  # else headers and body, written apart, meet delayed ACKs: +40 ms
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.fake._lock:
            self.server.fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.server.fake._lock:
            self.server.fake._connections.discard(self.connection)
        with contextlib.suppress(OSError):  # the client went away (a cancelled or timed-out call)
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no access log: tests and benchmarks would drown in it

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            model = {"id": "scripted", "object": "model", "created": 0, "owned_by": "hermetic"}
            self._json(200, {"object": "list", "data": [model]})
        else:
            self._error(404, f"no such path: GET {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/v1/embeddings"):
            self._error(404, f"no such path: POST {self.path}")
            return
        try:
            body = json.loads(raw)
        except ValueError as exc:
            self._error(400, f"the request body is not JSON: {exc}")
            return
        fake = self.server.fake
        if self.path.rstrip("/") == "/v1/embeddings":
            with fake._lock:
                fake.embedding_requests.append(body)
            if fake.embeddings_down:
                self._error(503, "embeddings are down (scripted)")
            else:
                self._json(*fake_embeddings.answer(body))
            return
        received = time.perf_counter()
        if fake.require_key is not None and self.headers.get("Authorization") != f"Bearer {fake.require_key}":
            self._json(
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided.",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_api_key",
                    }
                },
            )
            return
        number, turn = fake._next(body)
        if turn is None:
            self._error(
                500, f"the script is exhausted: it has {number - 1} turns and this is request {number}"
            )
            return
        if turn.delay and fake._stopping.wait(turn.delay):
            return  # stopping: the connection is dropped
        try:
            if turn.error is not None:
                self._error(turn.error, turn.message or f"scripted error {turn.error}")
            elif body.get("stream"):
                self._stream(body, turn, received)
            elif turn.drop:
                self._drop()
            else:
                self._json(200, _completion(body, turn))
        except OSError:
            self.close_connection = True  # the client gave up waiting (a timeout or a cancel)

    def _drop(self) -> None:
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def _json(self, status: int, data: dict[str, Any]) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _error(self, status: int, message: str) -> None:
        kind = "rate_limit_error" if status == 429 else "server_error" if status >= 500 else "invalid_request"
        self._json(status, {"error": {"message": message, "type": kind, "param": None, "code": str(status)}})

    def _stream(self, body: dict[str, Any], turn: Turn, received: float) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        events = [f"data: {json.dumps(chunk)}\n\n" for chunk in _chunks(body, turn)] + ["data: [DONE]\n\n"]
        if turn.drop:
            events = events[: len(events) // 2]
        if turn.pace:
            for event in events:  # token by token, as a slow model writes
                self.wfile.write(_http_chunk(event.encode()))
                self.wfile.flush()
                if self.server.fake._stopping.wait(turn.pace):
                    return
        else:
            # One write for the whole reply: the scripted text is all there, and it keeps the server fast
            payload = b"".join(_http_chunk(event.encode()) for event in events)
            with self.server.fake._lock:
                self.server.fake.timeline.append((received, time.perf_counter()))
            self.wfile.write(payload)
        if turn.drop:
            self._drop()
        else:
            self.wfile.write(b"0\r\n\r\n")


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _finish_reason(turn: Turn) -> str:
    return "tool_calls" if turn.tool_calls else "stop"


def _usage(body: dict[str, Any], turn: Turn) -> dict[str, int]:
    prompt = rough_tokens(json.dumps(body.get("messages", [])) + json.dumps(body.get("tools", [])))
    reply = (turn.text or "") + "".join(call.name + call.arguments_text for call in turn.tool_calls)
    completion = rough_tokens(reply)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _head(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": kind,
        "created": int(time.time()),
        "model": body.get("model", "scripted"),
        "system_fingerprint": None,
    }


def _call_ids(turn: Turn) -> list[str]:
    return [f"call_{uuid.uuid4().hex[:24]}" for _ in turn.tool_calls]


def _completion(body: dict[str, Any], turn: Turn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text, "refusal": None}
    if turn.reasoning is not None:
        message["reasoning_content"] = turn.reasoning
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_text},
            }
            for call_id, call in zip(_call_ids(turn), turn.tool_calls, strict=True)
        ]
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": _finish_reason(turn)}
    return _head(body, "chat.completion") | {"choices": [choice], "usage": _usage(body, turn)}


def _chunks(body: dict[str, Any], turn: Turn) -> Iterator[dict[str, Any]]:
    """The stream's chunks as OpenAI sends them: role first, text pieces, tool-call pieces, finish, usage."""
    head = _head(body, "chat.completion.chunk")
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    if include_usage:
        head["usage"] = None

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return head | {"choices": [choice]}

    yield chunk({"role": "assistant", "content": "", "refusal": None})
    for piece in re.findall(r"\s*\S+\s*|\s+", turn.reasoning or ""):
        yield chunk({"content": None, "reasoning_content": piece})
    for piece in re.findall(r"\s*\S+\s*|\s+", turn.text or ""):  # word by word, as tokens arrive
        yield chunk({"content": piece})
    for index, (call_id, call) in enumerate(zip(_call_ids(turn), turn.tool_calls, strict=True)):
        start = {"index": index, "id": call_id, "type": "function"}
        yield chunk({"tool_calls": [start | {"function": {"name": call.name, "arguments": ""}}]})
        text = call.arguments_text
        for at in range(0, len(text), ARGUMENT_PIECE):
            yield chunk(
                {"tool_calls": [{"index": index, "function": {"arguments": text[at : at + ARGUMENT_PIECE]}}]}
            )
    yield chunk({}, _finish_reason(turn))
    if include_usage:
        yield head | {"choices": [], "usage": _usage(body, turn)}
