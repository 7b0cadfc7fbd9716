"""Serve ACP on this process's stdin/stdout. The protocol keeps the real stdout to itself: file
descriptor 1 is pointed at stderr first, so a stray print (ours, a library's, a child process's) cannot
corrupt the JSON-RPC stream. A line that is not JSON gets a parse error (the SDK would only log it)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import cast

from acp import Agent, run_agent
from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
from acp.stdio import stdio_streams

from .server import HermeticAcp

PARSE_ERROR = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error: not JSON"}}


async def serve_stdio(surface: HermeticAcp) -> None:
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    real_stdout, sys.stdout = sys.stdout, protocol_out  # type: ignore[assignment]
    try:
        stdin, writer = await stdio_streams(limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    finally:
        sys.stdout = real_stdout
    checked = asyncio.StreamReader(limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    pump = asyncio.create_task(_check_lines(stdin, checked, writer))
    try:
        # the SDK names the streams from the editor's side; it routes the methods an agent has and
        # answers method-not-found for the others
        await run_agent(cast(Agent, surface), writer, checked)
    finally:
        pump.cancel()
        surface.close()


async def _check_lines(
    stdin: asyncio.StreamReader, out: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Pass JSON objects on to the SDK; answer anything else with a JSON-RPC parse error."""
    while line := await stdin.readline():
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if isinstance(message, dict):
            out.feed_data(line if line.endswith(b"\n") else line + b"\n")
        else:
            writer.write(json.dumps(PARSE_ERROR).encode() + b"\n")
            await writer.drain()
    out.feed_eof()
