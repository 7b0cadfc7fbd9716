"""An MCP stdio server run inside a sandbox, as a transport for the `mcp` SDK's Client.

The server is a background process of the sandbox's runtime with its stderr kept apart; `proc.attach`
streams its stdout over the runtime's one stream and `proc.write` feeds its stdin. No port opens in the
sandbox and its network stays what its policy says.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import logging
import math
import shlex
import threading
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

from backends import Sandbox, SandboxError

log = logging.getLogger(__name__)
MAX_LINE = 16 << 20
"""Bytes of one message line; a server that sends more without a newline is talking garbage."""


class ServerExited(ConnectionError):
    """The server's process ended (its exit code and the tail of its stderr say why)."""


@contextlib.asynccontextmanager
async def sandbox_stdio(
    sandbox: Sandbox, command: list[str], env: dict[str, str], label: str
) -> AsyncIterator[tuple[Any, Any]]:
    """Start `command` in `sandbox` and yield the (read, write) streams the SDK's Client speaks over."""
    started = await anyio.to_thread.run_sync(
        lambda: sandbox.runtime.proc_spawn(command=shlex.join(command), env=env, separate_stderr=True)
    )
    proc_id = started["id"]
    loop = asyncio.get_running_loop()
    incoming, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](math.inf)
    write_stream, outgoing = anyio.create_memory_object_stream[SessionMessage](0)
    pending = bytearray()

    def deliver(item: SessionMessage | Exception) -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            incoming.send_nowait(item)

    def on_output(method: str, params: dict[str, Any]) -> None:  # on the channel's reading thread
        pending.extend(base64.b64decode(params.get("data", "")))
        *lines, rest = bytes(pending).split(b"\n")
        pending[:] = rest
        if len(pending) > MAX_LINE:
            pending.clear()
            lines.append(b"<a line over 16 MB>")
        for line in lines:
            if line.strip():
                loop.call_soon_threadsafe(deliver, _parse(line, label))

    def attach() -> None:
        try:
            status = sandbox.runtime.proc_attach(id=proc_id, call_timeout=None, on_notify=on_output)
            stderr = status.get("stderr", "").strip()[-1000:]
            reason: Exception = ServerExited(
                f"{label} exited with code {status.get('exit_code')}" + (f": {stderr}" if stderr else "")
            )
        except SandboxError as exc:
            reason = ServerExited(f"{label}: its sandbox is gone: {exc}")
        log.info("%s", reason)
        loop.call_soon_threadsafe(deliver, reason)
        loop.call_soon_threadsafe(incoming.close)

    threading.Thread(target=attach, name=f"mcp-{label}", daemon=True).start()

    async def write() -> None:
        async with outgoing:
            async for message in outgoing:
                line = message.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                try:
                    await anyio.to_thread.run_sync(
                        functools.partial(sandbox.runtime.proc_write, id=proc_id, data=line, call_timeout=30)
                    )
                except SandboxError as exc:  # it stopped reading: the session sees the end
                    deliver(ServerExited(f"{label} no longer reads its stdin: {exc}"))
                    incoming.close()
                    return

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(write)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: _kill(sandbox, proc_id, label))
            tasks.cancel_scope.cancel()
            for stream in (read_stream, write_stream, incoming, outgoing):
                stream.close()


def _parse(line: bytes, label: str) -> SessionMessage | Exception:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError as exc:
        log.warning("%s wrote a line that is not JSON-RPC: %.200r", label, line)
        return exc


def _kill(sandbox: Sandbox, proc_id: str, label: str) -> None:
    try:
        sandbox.runtime.proc_kill(id=proc_id, signal="KILL", wait=2.0, call_timeout=10)
    except SandboxError as exc:
        log.info("%s: could not kill it (already gone?): %s", label, exc)
