"""Wire format of the runtime: newline-delimited JSON shaped like JSON-RPC 2.0 (long strings optionally
as raw bytes after their line), and its error codes."""

from __future__ import annotations

import json
from typing import Any

# JSON-RPC's own codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# Hermetic's codes: what went wrong inside the sandbox, each with one meaning.
NOT_INITIALIZED = 1000
NOT_FOUND = 1001
PATH_DENIED = 1002
PATCH_NO_MATCH = 1003
PATCH_AMBIGUOUS = 1004
NO_SUCH_SESSION = 1005
SESSION_BUSY = 1006
RESOURCE_EXHAUSTED = 1007
NOT_A_FILE = 1008
BINARY_FILE = 1009
NO_SUCH_PROCESS = 1010
PROTOCOL_MISMATCH = 1011
IO_ERROR = 1012
BROWSER_ERROR = 1013
SESSION_IDLE = 1014

# The python tool's kernel (sandboxes/kernel.py).
KERNEL_UNAVAILABLE = 1030


class RpcError(Exception):
    """An error reported to the caller as a JSON-RPC error object."""

    def __init__(self, code: int, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


RAW_MIN = 32 * 1024
"""A string field at least this long travels as raw bytes after its message's line, when both ends
said so in the handshake (`raw`): JSON escaping and parsing 1 MB costs each end more than the copy."""
RAW_MAX = 256 * 1024 * 1024
"""The most raw bytes one message may announce: a bound on what a confused peer can make us buffer."""


def encode(message: dict[str, Any], raw: bool = False) -> bytes:
    """One message as one line (ASCII-escaped, so odd file names never break it). With `raw`, the long
    string fields of its body (params, or result) leave the line: the line names them in order,
    `"raw": [[field, bytes], ...]`, and their UTF-8 (surrogatepass: any str round-trips) follows it."""
    message["jsonrpc"] = "2.0"
    key = _body_key(message)
    body = message.get(key)
    tail: list[bytes] = []
    if raw and isinstance(body, dict):
        moved = [name for name, value in body.items() if isinstance(value, str) and len(value) >= RAW_MIN]
        if moved:
            body = dict(body)
            tail = [body.pop(name).encode("utf-8", "surrogatepass") for name in moved]
            message = {**message, key: body, "raw": [[k, len(t)] for k, t in zip(moved, tail)]}
    line = json.dumps(message, separators=(",", ":")).encode("ascii") + b"\n"
    return b"".join([line, *tail]) if tail else line


def raw_fields(message: dict[str, Any]) -> tuple[list[tuple[str, int]], int]:
    """The raw fields a message's line announces, as (field, bytes), and how many bytes follow the line
    in all; ValueError when malformed."""
    spec = message.get("raw", [])
    if not isinstance(spec, list) or not all(
        isinstance(item, list)
        and len(item) == 2
        and isinstance(item[0], str)
        and type(item[1]) is int
        and item[1] >= 0
        for item in spec
    ):
        raise ValueError("raw must be a list of [field, bytes] pairs")
    fields = [(name, size) for name, size in spec]
    total = sum(size for _, size in fields)
    if total > RAW_MAX:
        raise ValueError("raw fields over %d bytes" % RAW_MAX)
    return fields, total


def attach_raw(message: dict[str, Any], fields: list[tuple[str, int]], data: bytes | memoryview) -> None:
    """Put the raw bytes that followed a message's line back into its body as the fields they were."""
    body = message.setdefault(_body_key(message), {})
    if not isinstance(body, dict):
        raise ValueError("a message with raw fields needs an object body")
    message.pop("raw", None)
    start = 0
    for name, size in fields:
        body[name] = str(data[start : start + size], "utf-8", "surrogatepass")
        start += size


def _body_key(message: dict[str, Any]) -> str:
    return "params" if "method" in message else "result"


def response(req_id: Any, result: Any, raw: bool = False) -> bytes:
    return encode({"id": req_id, "result": result}, raw)


def error_response(req_id: Any, error: RpcError) -> bytes:
    return encode({"id": req_id, "error": error.to_json()})


def notification(method: str, params: dict[str, Any], raw: bool = False) -> bytes:
    return encode({"method": method, "params": params}, raw)
