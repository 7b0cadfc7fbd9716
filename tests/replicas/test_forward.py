"""A request forwarded to its session's owner, when the owner dies: sent on only if the owner never had
it, or if asking again changes nothing. A POST the owner read before dying is answered 502 (it may have
been taken), never replayed on the next owner: replayed, a message was posted and answered twice."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import httpx
import pytest
from starlette.datastructures import Headers
from starlette.types import Message

from control_plane.api.forward import Forwarded, forward
from control_plane.store.leases import Holder


async def _owner_dying_with_the_request(taken: list[bytes]) -> asyncio.Server:
    """A replica on loopback that reads a whole request and dies before it answers."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        taken.append(await reader.readexactly(length))
        writer.transport.abort()  # a reset, as from a SIGKILLed process

    return await asyncio.start_server(serve, "127.0.0.1", 0)


def _request(method: str, body: bytes) -> tuple[dict[str, Any], Headers]:
    scope = {"type": "http", "method": method, "path": "/sessions/s1/messages", "query_string": b""}
    return scope, Headers({"content-type": "application/json", "authorization": "Bearer t"})


async def _forwarded(method: str, address: str | None) -> tuple[Forwarded, list[Message], list[bytes]]:
    taken: list[bytes] = []
    server = await _owner_dying_with_the_request(taken)
    port = server.sockets[0].getsockname()[1]
    holder = Holder(owner="r1", address=address or f"http://127.0.0.1:{port}", left=1.0, running=False)
    body = json.dumps({"content": "hello"}).encode()
    scope, headers = _request(method, body)
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async with server, httpx.AsyncClient(timeout=10) as client:
        outcome = await forward(client, holder, scope, headers, body, send)
    return outcome, sent, taken


def test_a_post_its_owner_read_before_dying_is_answered_502_and_not_sent_again() -> None:
    outcome, sent, taken = asyncio.run(_forwarded("POST", None))
    assert taken == [b'{"content": "hello"}']  # the owner had it
    assert outcome is Forwarded.LOST  # so the middleware does not replay it on the next owner
    assert sent[0]["status"] == 502
    assert ("retry-after", "5") in [(k.decode(), v.decode()) for k, v in sent[0]["headers"]]
    assert "may have been taken" in json.loads(sent[1]["body"])["detail"]


def test_a_get_its_owner_read_before_dying_goes_to_the_next_owner() -> None:
    outcome, sent, taken = asyncio.run(_forwarded("GET", None))
    assert len(taken) == 1
    assert outcome is Forwarded.NOT_TAKEN and sent == []  # asked again of the next owner: harmless


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_a_request_its_owner_never_got_goes_to_the_next_owner(method: str) -> None:
    with socket.socket() as bound:  # bound, never listening: a connection to it is refused
        bound.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{bound.getsockname()[1]}"
        outcome, sent, taken = asyncio.run(_forwarded(method, gone))
    assert taken == [] and sent == []
    assert outcome is Forwarded.NOT_TAKEN


def test_a_caller_that_leaves_mid_stream_closes_the_owners_stream() -> None:
    """A forwarded stream (a /v1 turn's, an MCP session's events) whose caller disconnects is closed at
    the owner too, which then stops what it streams, as when the caller was connected to it."""

    async def scenario() -> tuple[Forwarded, bool]:
        closed = asyncio.Event()

        async def stream_forever(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            )
            writer.write(b"6\r\ndata:1\r\n")
            await writer.drain()
            if await reader.read() == b"":  # nothing more is sent: only the forwarder's close ends this
                closed.set()

        server = await asyncio.start_server(stream_forever, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        holder = Holder(owner="r1", address=f"http://127.0.0.1:{port}", left=1.0, running=False)
        scope, headers = _request("GET", b"")
        first_chunk, gone = asyncio.Event(), asyncio.Event()

        async def send(message: Message) -> None:
            if message.get("body"):
                first_chunk.set()

        async def receive() -> Message:
            await gone.wait()
            return {"type": "http.disconnect"}

        async with server, httpx.AsyncClient(timeout=10) as client:
            forwarding = asyncio.create_task(forward(client, holder, scope, headers, b"", send, receive))
            await asyncio.wait_for(first_chunk.wait(), 10)
            gone.set()  # the caller hangs up
            outcome = await asyncio.wait_for(forwarding, 10)
            await asyncio.wait_for(closed.wait(), 10)
        return outcome, closed.is_set()

    assert asyncio.run(scenario()) == (Forwarded.ANSWERED, True)
