"""With replicas: a request for a session held by another replica is forwarded to that owner, and the
leases this replica holds are renewed (and a dead replica's running sessions taken over) in the background.

Forwarded: every /sessions/ID/... route but the two any replica answers from the database (GET
/sessions/ID, its history, and /sessions/ID/events, its event stream), a /v1 turn that continues a
session (by its session header, its chat's conversation key or its previous response id), an A2A request
about a context or task whose session runs elsewhere (its next message, get, cancel, resubscribe), and a
request of an MCP session (its Mcp-Session-Id) to the replica that opened it. The owner is
asked with the caller's own credentials (it authenticates them) and a header naming it, so a request
reaching a process that is not that replica any more (restarted on the same address) is refused with 421,
never served twice.
An owner that dies holding a request that changes something (a POST) leaves the caller a 502 saying it may
have been taken: sent again to the next owner, a message would be posted (and answered) twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import re
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
from fastapi import HTTPException, WebSocket, status
from fastapi.security import HTTPAuthorizationCredentials
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..a2a.card import RPC_PATH
from ..mcp.transports import refuse
from ..store.leases import Holder
from .a2a_store import session_of
from .forward_ws import relay
from .mcp_routes import MCP_PATH
from .openai.conversations import TURNS, continued_session
from .openai.wire import SESSION_HEADER
from .profiles import Hub, Profile, caller, websocket_profile
from .replicas import Replica, Replication
from .signins import COOKIE

log = logging.getLogger(__name__)
OWNER = "x-hermetic-owner"
"""On a forwarded request: the replica it is meant for."""
_SESSION = re.compile(r"^/sessions/([A-Za-z0-9_-]{1,64})(/[^/]+)?(/.*)?$")
_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"}
_SAFE = {"GET", "HEAD", "OPTIONS"}
_LOST = (
    "the replica holding this session stopped while it had this request: it may have been taken (a message "
    "posted, a question answered); read the session (GET /sessions/ID) before sending it again"
)


_RENEWER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lease-renewal")
"""The renewals' own thread, never queued behind the default executor (6 threads on 2 cores, busy with
every follower's database reads under load): a late renewal lets a live replica's leases lapse, and another
replica takes over turns it is still running."""


class Forwarded(enum.Enum):
    """What became of a request sent on to its session's owner."""

    ANSWERED = "answered"
    """The owner's answer went back to the caller."""
    NOT_TAKEN = "not taken"
    """The owner never had it (gone, or restarted as another replica): for the next owner."""
    LOST = "lost"
    """The owner had it and died: the caller was told it may have been taken; never sent again."""


def _read_anywhere(method: str, part: str | None) -> bool:
    return (method == "GET" and part is None) or part == "/events"


class ForwardToOwner:
    """ASGI middleware: requests for a session another live replica holds go to that replica."""

    def __init__(self, app: ASGIApp, hub: Hub, replica: Replica, client: httpx.AsyncClient) -> None:
        self.app, self.hub, self.replica, self.client = app, hub, replica, client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):  # the lifespan: no path
            return await self.app(scope, receive, send)
        found = _SESSION.match(scope["path"])
        if scope["type"] == "websocket":
            if found is not None and found[2] == "/terminal":
                return await self._terminal(found[1], scope, receive, send)
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        turn = scope["method"] == "POST" and scope["path"] in (*TURNS, RPC_PATH)
        mcp = scope["path"] == MCP_PATH and MCP_SESSION_ID_HEADER in headers
        if not (mcp or turn or (found is not None and not _read_anywhere(scope["method"], found[2]))):
            return await self.app(scope, receive, send)
        meant = headers.get(OWNER)
        if meant is not None:  # forwarded here: served here or refused, never sent on again
            if meant != self.replica.id:
                return await _answer(send, 421, f"this is not replica {meant} (it stopped)")
            return await self.app(scope, receive, send)
        profile = await asyncio.to_thread(self._profile, scope)
        if profile is None or profile.replication is None:
            return await self.app(scope, receive, send)  # the route answers (401, or no replicas)
        if mcp:
            return await self._mcp(profile.replication, scope, receive, send)
        body = await _body(receive)
        session_id = found[1] if found is not None else await asyncio.to_thread(_about, profile, scope, body)
        if session_id is None:  # a new /v1 conversation or A2A context: this replica starts it
            return await self.app(scope, _replay(body, receive), send)

        async def here() -> None:
            await self.app(scope, _replay(body, receive), send)

        async def there(holder: Holder) -> bool:
            forwarded = await forward(self.client, holder, scope, headers, body, send, receive)
            return forwarded is not Forwarded.NOT_TAKEN

        if not await self._at_owner(profile, session_id, here, there):
            await _answer(send, 503, f"session {session_id}'s replica does not answer; try again", retry=5)

    async def _at_owner(
        self,
        profile: Profile,
        session_id: str,
        here: Callable[[], Awaitable[None]],
        there: Callable[[Holder], Awaitable[bool]],
    ) -> bool:
        """Serve at the session's owner: `here` when this replica holds (or now takes) its lease, else
        `there` (False: the owner never had it; once its lease lapses the next owner is tried). False
        when no owner answered."""
        assert profile.replication is not None
        for _ in range(3):  # the owner, or after it died and its lease lapsed, a new owner
            holder = await asyncio.to_thread(profile.replication.leases.claim, session_id)
            if holder.owner == self.replica.id:
                if holder.running and session_id not in profile.live:  # taken from a replica that died
                    await asyncio.to_thread(_take_over, profile, session_id)  # mid-turn: that turn ends
                await here()
                return True
            if await there(holder):
                return True
            await asyncio.sleep(holder.left)  # a dead owner: its lease lapses then (a timer, not a poll)
        return False

    async def _mcp(self, replication: Replication, scope: Scope, receive: Receive, send: Send) -> None:
        """A request of an MCP session: served by the replica that opened it, wherever it lands. A session
        whose replica died is gone with it (404: the client initializes a new one)."""
        headers = Headers(scope=scope)
        holder = await asyncio.to_thread(replication.mcp.owner, headers[MCP_SESSION_ID_HEADER])
        if holder is None or holder.owner == self.replica.id:  # here, or unknown: the SDK answers (a 404)
            return await self.app(scope, receive, send)
        body = await _body(receive)
        if await forward(self.client, holder, scope, headers, body, send, receive) is Forwarded.NOT_TAKEN:
            await refuse(send, 404, "Session not found (its replica stopped): initialize a new session")

    async def _terminal(self, session_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        """A session's terminal WebSocket: relayed to the session's owner (forward_ws.py)."""
        websocket = WebSocket(scope, receive, send)
        meant = websocket.headers.get(OWNER)
        if meant is not None:  # relayed here: served here or refused (its handshake: HTTP 403)
            if meant != self.replica.id:
                return await websocket.close(status.WS_1013_TRY_AGAIN_LATER)
            return await self.app(scope, receive, send)
        profile = await asyncio.to_thread(websocket_profile, websocket)
        if profile is None or profile.replication is None:
            return await self.app(scope, receive, send)  # the route answers (refused, or no replicas)

        async def here() -> None:
            await self.app(scope, receive, send)

        async def there(holder: Holder) -> bool:
            keep = {"authorization", "cookie", "origin", "user-agent"}
            return await relay(holder, websocket, _outgoing(websocket.headers, holder, keep))

        if await self._at_owner(profile, session_id, here, there):
            return
        await websocket.accept()  # a browser cannot read a refused handshake's reason
        await websocket.send_json(
            {"type": "error", "message": f"session {session_id}'s replica does not answer"}
        )
        await websocket.close(status.WS_1013_TRY_AGAIN_LATER)

    def _profile(self, scope: Scope) -> Profile | None:
        request = Request(scope)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        creds = HTTPAuthorizationCredentials(scheme=scheme, credentials=token) if token else None
        try:
            name = caller(request, creds, request.cookies.get(COOKIE))
        except HTTPException:
            return None
        return self.hub.profile(name) if name else None


def _take_over(profile: Profile, session_id: str) -> None:
    """Resume the session here, which ends the turn its dead replica left running (profiles.py), before a
    request that reads no session (an A2A task, a terminal) is served: else polling it would keep the lease
    taken and the turn never ended."""
    with contextlib.suppress(HTTPException):  # gone, or taken by another replica: the route answers
        profile.session(session_id)


def _about(profile: Profile, scope: Scope, body: bytes) -> str | None:
    """The session a /v1 turn or an A2A request continues, if any."""
    if scope["path"] == RPC_PATH:
        return session_of(profile, body)
    return continued_session(profile, scope["path"], Headers(scope=scope).get(SESSION_HEADER), body)


async def forward(
    client: httpx.AsyncClient,
    holder: Holder,
    scope: Scope,
    headers: Headers,
    body: bytes,
    send: Send,
    receive: Receive | None = None,
) -> Forwarded:
    """Send the request to the holder and its answer back (or, when the holder died holding a request
    that changes something, say so: it may have been taken, so it is not sent again elsewhere). With the
    caller's `receive`, a caller that disconnects mid-answer ends the owner's request too (a /v1 stream's
    run is interrupted, an MCP session's event stream closed), as if it had been sent to the owner."""
    if holder.address is None:
        return Forwarded.NOT_TAKEN
    outgoing = _outgoing(headers, holder, None)
    query = scope.get("query_string", b"").decode()
    url = f"{holder.address}{scope['path']}" + (f"?{query}" if query else "")
    request = client.build_request(scope["method"], url, headers=outgoing, content=body)
    try:
        response = await client.send(request, stream=True)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # never reached it: nothing was taken
        log.info("replica %s at %s does not answer (%s): waiting for its lease", holder.owner, url, exc)
        return Forwarded.NOT_TAKEN
    except httpx.TransportError as exc:  # it had the request and stopped: taken or not, nobody knows
        log.warning("replica %s at %s stopped while answering (%s)", holder.owner, url, exc)
        if scope["method"] in _SAFE:
            return Forwarded.NOT_TAKEN  # asking again changes nothing
        await _answer(send, 502, _LOST, retry=5)
        return Forwarded.LOST
    try:
        if response.status_code == 421:
            return Forwarded.NOT_TAKEN
        kept = [(k.encode(), v.encode()) for k, v in response.headers.items() if k not in _HOP]
        await send({"type": "http.response.start", "status": response.status_code, "headers": kept})
        pump = asyncio.ensure_future(_pump(response, send))
        if receive is not None:  # a caller that leaves closes the owner's stream (the aclose below)
            left = asyncio.ensure_future(_left(receive))
            await asyncio.wait({pump, left}, return_when=asyncio.FIRST_COMPLETED)
            left.cancel()
            await asyncio.gather(left, return_exceptions=True)
            if not pump.done():  # the caller left
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)
                return Forwarded.ANSWERED
        await pump
    finally:
        await response.aclose()
    return Forwarded.ANSWERED


async def _pump(response: httpx.Response, send: Send) -> None:
    async for chunk in response.aiter_raw():  # as sent: its content-encoding header goes with it
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _left(receive: Receive) -> None:
    """Until the caller disconnects (its request's body was read before)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _outgoing(headers: Headers, holder: Holder, keep: set[str] | None) -> list[tuple[str, str]]:
    """The caller's headers for the owner (those in `keep`, else all but hop-by-hop ones) and the owner's
    name. A console sign-in (a cookie, no bearer token) was checked here, its Origin against this
    replica's host: the owner, reached at its own address, is told its own origin."""
    signed_in = "authorization" not in headers
    kept = [
        (k, holder.address if k == "origin" and signed_in and holder.address else v)
        for k, v in headers.items()
        if (k in keep if keep is not None else k not in _HOP)
    ]
    return [*kept, (OWNER, holder.owner)]


async def _body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def again() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


async def _answer(send: Send, status: int, detail: str, retry: int | None = None) -> None:
    headers = [(b"content-type", b"application/json")] + (
        [(b"retry-after", str(retry).encode())] if retry else []
    )
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps({"detail": detail}).encode()})


async def keep_leases(hub: Hub, replica: Replica) -> None:
    """Renew this replica's leases every third of their length; let go of any it lost; take over the
    running sessions of replicas that stopped renewing theirs."""
    while True:
        await asyncio.sleep(replica.ttl / 3)  # the renewal's period
        for profile in list(hub.profiles.values()):
            if profile.replication is not None:
                try:
                    await _renew(profile)
                except Exception:  # the database is away: the next period tries again
                    log.exception(
                        "profile %s: could not renew this replica's leases", profile.settings.profile
                    )


async def _renew(profile: Profile) -> None:
    assert profile.replication is not None
    leases = profile.replication.leases
    loop = asyncio.get_running_loop()
    for session_id in await loop.run_in_executor(_RENEWER, leases.renew, list(profile.live)):
        log.warning("session %s: its lease went to another replica; letting it go here", session_id)
        live = profile.live.pop(session_id, None)
        if live is not None:
            live.conversation.interrupt()
    for session_id in await asyncio.to_thread(leases.lapsed_runs):
        try:
            await asyncio.to_thread(profile.session, session_id)
            log.warning("session %s: taken over from a replica that stopped mid-turn", session_id)
        except HTTPException:  # another replica took it first, or it is gone
            continue
