"""Wire format of the runtime: newline-delimited JSON shaped like JSON-RPC 2.0, and its error codes."""

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


def encode(message: dict[str, Any]) -> bytes:
    """One message as one line. ASCII-escaped so odd file names (surrogates) never break it."""
    message["jsonrpc"] = "2.0"
    return json.dumps(message, separators=(",", ":")).encode("ascii") + b"\n"


def response(req_id: Any, result: Any) -> bytes:
    return encode({"id": req_id, "result": result})


def error_response(req_id: Any, error: RpcError) -> bytes:
    return encode({"id": req_id, "error": error.to_json()})


def notification(method: str, params: dict[str, Any]) -> bytes:
    return encode({"method": method, "params": params})
