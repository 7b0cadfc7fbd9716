"""With replicas: a session's terminal WebSocket (/sessions/ID/terminal) that lands on a replica other than
the session's owner is relayed to the owner, whose process holds the sandbox: the caller's handshake is
authenticated here, a WebSocket to the owner is opened with the caller's credentials (and a header naming
the owner, as forward.py's requests carry), and frames go both ways as they come, until either side
closes. The relay uses the `websockets` library's asyncio client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fastapi import WebSocket, WebSocketDisconnect, status
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

from ..store.leases import Holder

log = logging.getLogger(__name__)
OPEN_TIMEOUT = 10.0
"""Seconds to reach the owner and finish its handshake: past them it is taken as gone."""


async def relay(holder: Holder, websocket: WebSocket, headers: list[tuple[str, str]]) -> bool:
    """Relay the caller's WebSocket to the holder with `headers` (the caller's credentials, the owner's
    name); False when the holder could not be reached (nothing was accepted from the caller yet: the
    next owner may serve it)."""
    if holder.address is None:
        return False
    scope = websocket.scope
    query = scope.get("query_string", b"").decode()
    url = "ws" + holder.address.removeprefix("http") + scope["path"] + (f"?{query}" if query else "")
    try:
        upstream = await connect(
            url,
            additional_headers=headers,
            max_size=None,  # the owner's terminal output, replayed whole on attach (its last MiB)
            compression=None,
            open_timeout=OPEN_TIMEOUT,
        )
    except (OSError, TimeoutError, InvalidHandshake) as exc:
        log.info("replica %s at %s takes no WebSocket (%s): waiting for its lease", holder.owner, url, exc)
        return False
    async with upstream:
        await websocket.accept()
        pumps = [
            asyncio.create_task(_to_owner(websocket, upstream)),
            asyncio.create_task(_to_caller(upstream, websocket)),
        ]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
    code = upstream.close_code or status.WS_1000_NORMAL_CLOSURE
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):  # the caller closed it first
        await websocket.close(code if code != 1006 else status.WS_1011_INTERNAL_ERROR)
    return True


async def _to_owner(websocket: WebSocket, upstream: ClientConnection) -> None:
    while True:
        frame = await websocket.receive()
        if frame["type"] == "websocket.disconnect":
            await upstream.close()
            return
        data = frame.get("text") if frame.get("text") is not None else frame.get("bytes")
        if data is not None:
            await upstream.send(data)


async def _to_caller(upstream: ClientConnection, websocket: WebSocket) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for data in upstream:
            if isinstance(data, str):
                await websocket.send_text(data)
            else:
                await websocket.send_bytes(data)
