"""A live terminal in a session's sandbox over a WebSocket (the console's sandbox page, xterm.js): the
runtime's `term.*` methods carried both ways. Output is read by one thread per connection in long
reads on the sandbox's persistent channel (each `term.send` blocks in the runtime until output comes),
so it streams with no polling; keys and window sizes go straight to `term.send` and `term.resize`.
The terminal outlives its connection: ?terminal=ID attaches again and replays the output the runtime
kept (up to its last MiB), which rebuilds the screen. Mounted by api/app.py."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, WebSocket, WebSocketDisconnect, status
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from backends import Sandbox, SandboxError
from backends.terminal import CALL_MARGIN

from .bounds import SessionId
from .profiles import websocket_profile

log = logging.getLogger(__name__)
router = APIRouter(tags=["sandbox"])
SHELL = "exec bash -l"
LONG_READ = 20.0
"""Seconds one output read waits in the runtime; a closed connection's reader ends within this."""
PAST_THE_END = 1 << 62
"""The offset a write reads from: nothing (its output comes through the reader)."""
MAX_ROWS, MAX_COLS = 500, 1000  # the runtime's bounds
IN_FLIGHT = 8
"""Output reads not yet sent to the browser: past these the reader waits (a slow browser slows the
reads, never fills this server's memory; the runtime keeps the last MiB and says what it dropped)."""


class Typed(BaseModel):
    type: Literal["input"]
    data: str = Field(max_length=65536)


class Resized(BaseModel):
    type: Literal["resize"]
    rows: int = Field(ge=1, le=MAX_ROWS)
    cols: int = Field(ge=1, le=MAX_COLS)


ClientMessage = TypeAdapter(Annotated[Typed | Resized, Field(discriminator="type")])


async def _refuse(websocket: WebSocket, message: str) -> None:
    """After the handshake (a browser cannot read a refused handshake's body): say why, and close."""
    await websocket.accept()
    await websocket.send_json({"type": "error", "message": message})
    await websocket.close(status.WS_1008_POLICY_VIOLATION)


def _attach(sandbox: Sandbox, wanted: str | None, rows: int, cols: int) -> dict[str, Any]:
    """The terminal to show: `wanted` while it runs (its kept output from the start), else a new shell."""
    if wanted is not None:
        for known in sandbox.runtime.term_list()["terminals"]:
            if known["id"] == wanted and known["running"]:
                sandbox.runtime.term_resize(id=wanted, rows=rows, cols=cols)
                return {**known, "attached": True}
    opened = sandbox.runtime.term_open(command=SHELL, rows=rows, cols=cols, timeout=0)
    return {**opened, "command": SHELL, "attached": False}


class _Reader:
    """Output reads in their own thread, from the start of the kept output until the program ends, the
    sandbox goes or `stop`; each answer goes to `deliver` (None last), at most IN_FLIGHT unsent."""

    def __init__(self, sandbox: Sandbox, tid: str, deliver: Callable[[dict[str, Any] | None], None]) -> None:
        self.sandbox, self.tid, self.deliver = sandbox, tid, deliver
        self.credits = threading.Semaphore(IN_FLIGHT)
        self.stopped = threading.Event()
        threading.Thread(target=self._run, name=f"console-term-{tid}", daemon=True).start()

    def sent(self) -> None:
        self.credits.release()

    def stop(self) -> None:
        self.stopped.set()
        self.credits.release()  # wakes a reader waiting for the browser

    def _run(self) -> None:
        offset = 0
        try:
            while True:
                result = self.sandbox.runtime.term_send(
                    id=self.tid,
                    offset=offset,
                    settle=0,
                    timeout=LONG_READ,
                    call_timeout=LONG_READ + CALL_MARGIN,
                )
                self.credits.acquire()
                if self.stopped.is_set():
                    return
                offset = int(result["offset"])
                self.deliver(dict(result))
                if not result["running"]:
                    return
        except SandboxError as exc:
            self.deliver({"error": str(exc)})
        finally:
            self.deliver(None)


async def _forward_output(
    websocket: WebSocket, answers: asyncio.Queue[dict[str, Any] | None], reader: _Reader
) -> None:
    while (result := await answers.get()) is not None:
        reader.sent()
        if "error" in result:
            await websocket.send_json({"type": "error", "message": result["error"]})
            return
        data = base64.b64decode(result["data"])
        if data:
            await websocket.send_bytes(data)
        if not result["running"]:
            await websocket.send_json({"type": "exit", "exit_code": result["exit_code"]})
            return


async def _forward_input(websocket: WebSocket, sandbox: Sandbox, tid: str) -> None:
    """The browser's keys and window sizes, in order; a malformed message is answered and skipped."""
    while True:
        frame = await websocket.receive()
        if frame["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(frame.get("code", 1000))
        try:
            message = ClientMessage.validate_json(frame.get("text") or frame.get("bytes") or b"")
        except ValidationError as exc:
            await websocket.send_json({"type": "error", "message": f"not a terminal message: {exc}"})
            continue
        try:
            if isinstance(message, Typed):
                await asyncio.to_thread(
                    sandbox.runtime.term_send, id=tid, data=message.data, offset=PAST_THE_END, timeout=0
                )
            else:
                await asyncio.to_thread(
                    sandbox.runtime.term_resize, id=tid, rows=message.rows, cols=message.cols
                )
        except SandboxError as exc:  # the program ended meanwhile: the reader says so
            log.debug("terminal %s: %s", tid, exc)


@router.websocket("/sessions/{session_id}/terminal")
async def sandbox_terminal(
    websocket: WebSocket,
    session_id: SessionId,
    terminal: Annotated[str | None, Query(pattern=r"^t[0-9]{1,9}$")] = None,
    rows: Annotated[int, Query(ge=1, le=MAX_ROWS)] = 24,
    cols: Annotated[int, Query(ge=1, le=MAX_COLS)] = 80,
) -> None:
    """A terminal in the session's sandbox (started if it has none), authenticated like every route: a
    bearer token, or the console's cookie from this server's own Origin (else the handshake is refused,
    HTTP 403; an unknown session or a sandbox that cannot start is an error message, then the close
    code 1008). `terminal`: attach to that running terminal instead of opening a shell. Server to
    browser: binary frames of terminal output, and JSON text frames {"type": "terminal", "id",
    "command", "attached"} first, {"type": "exit", "exit_code"} and {"type": "error", "message"}.
    Browser to server: JSON text frames {"type": "input", "data"} and {"type": "resize", "rows",
    "cols"}."""
    profile = await asyncio.to_thread(websocket_profile, websocket)
    if profile is None:  # the handshake is refused: HTTP 403
        await websocket.close(status.WS_1008_POLICY_VIOLATION)
        return
    try:
        await asyncio.to_thread(profile.session, session_id)
        sandbox = await asyncio.to_thread(profile.agent.sandboxes.get, session_id)
        opened = await asyncio.to_thread(_attach, sandbox, terminal, rows, cols)
    except HTTPException as exc:  # no such session
        await _refuse(websocket, str(exc.detail))
        return
    except SandboxError as exc:  # over limits.max_sandboxes (SandboxLimit), or the sandbox cannot start
        await _refuse(websocket, str(exc))
        return
    tid = str(opened["id"])
    loop = asyncio.get_running_loop()
    answers: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def deliver(result: dict[str, Any] | None) -> None:
        with contextlib.suppress(RuntimeError):  # the server stopped meanwhile: nobody left to tell
            loop.call_soon_threadsafe(answers.put_nowait, result)

    with profile.agent.sandboxes.using(session_id):  # not idle-closed while someone is at its terminal
        await websocket.accept()
        await websocket.send_json(
            {"type": "terminal", "id": tid, "command": opened["command"], "attached": opened["attached"]}
        )
        reader = _Reader(sandbox, tid, deliver)
        tasks = [
            asyncio.create_task(_forward_output(websocket, answers, reader)),
            asyncio.create_task(_forward_input(websocket, sandbox, tid)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reader.stop()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                    await task
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):  # the browser closed it first
            await websocket.close()
