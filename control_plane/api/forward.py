"""With replicas: a request for a session held by another replica is forwarded to that owner, and the
leases this replica holds are renewed (and a dead replica's running sessions taken over) in the background.

Forwarded: every /sessions/ID/... route but the two any replica answers from the database (GET
/sessions/ID, its history, and /sessions/ID/events, its event stream). The owner is asked with the
caller's own credentials (it authenticates them) and a header naming it, so a request reaching a process
that is not that replica any more (restarted on the same address) is refused with 421, never served twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re

import httpx
from fastapi import HTTPException
from fastapi.security import HTTPAuthorizationCredentials
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..store.leases import Holder
from .profiles import Hub, Profile, caller
from .replicas import Replica
from .signins import COOKIE

log = logging.getLogger(__name__)
OWNER = "x-hermetic-owner"
"""On a forwarded request: the replica it is meant for."""
_SESSION = re.compile(r"^/sessions/([A-Za-z0-9_-]{1,64})(/[^/]+)?(/.*)?$")
_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"}


def _read_anywhere(method: str, part: str | None) -> bool:
    return (method == "GET" and part is None) or part == "/events"


class ForwardToOwner:
    """ASGI middleware: requests for a session another live replica holds go to that replica."""

    def __init__(self, app: ASGIApp, hub: Hub, replica: Replica, client: httpx.AsyncClient) -> None:
        self.app, self.hub, self.replica, self.client = app, hub, replica, client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = _SESSION.match(scope["path"]) if scope["type"] == "http" else None
        if found is None or _read_anywhere(scope["method"], found[2]):
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        meant = headers.get(OWNER)
        if meant is not None:  # forwarded here: served here or refused, never sent on again
            if meant != self.replica.id:
                return await _answer(send, 421, f"this is not replica {meant} (it stopped)")
            return await self.app(scope, receive, send)
        profile = await asyncio.to_thread(self._profile, scope)
        if profile is None or profile.replication is None:
            return await self.app(scope, receive, send)  # the route answers (401, or no replicas)
        body = await _body(receive)
        for _ in range(3):  # the owner, or after it died and its lease lapsed, a new owner
            holder = await asyncio.to_thread(profile.replication.leases.claim, found[1])
            if holder.owner == self.replica.id:
                return await self.app(scope, _replay(body, receive), send)
            if await self._forward(holder, scope, headers, body, send):
                return
            await asyncio.sleep(holder.left)  # a dead owner: its lease lapses then (a timer, not a poll)
        await _answer(send, 503, f"session {found[1]}'s replica does not answer; try again", retry=5)

    def _profile(self, scope: Scope) -> Profile | None:
        request = Request(scope)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        creds = HTTPAuthorizationCredentials(scheme=scheme, credentials=token) if token else None
        try:
            name = caller(request, creds, request.cookies.get(COOKIE))
        except HTTPException:
            return None
        return self.hub.profile(name) if name else None

    async def _forward(self, holder: Holder, scope: Scope, headers: Headers, body: bytes, send: Send) -> bool:
        """Send the request to the holder and its answer back; False when the holder is gone."""
        if holder.address is None:
            return False
        outgoing = [(k, v) for k, v in headers.items() if k not in _HOP] + [(OWNER, holder.owner)]
        query = scope.get("query_string", b"").decode()
        url = f"{holder.address}{scope['path']}" + (f"?{query}" if query else "")
        request = self.client.build_request(scope["method"], url, headers=outgoing, content=body)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TransportError as exc:
            log.info("replica %s at %s does not answer (%s): waiting for its lease", holder.owner, url, exc)
            return False
        try:
            if response.status_code == 421:
                return False
            kept = [(k.encode(), v.encode()) for k, v in response.headers.items() if k not in _HOP]
            await send({"type": "http.response.start", "status": response.status_code, "headers": kept})
            async for chunk in response.aiter_raw():  # as sent: its content-encoding header goes with it
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()
        return True


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
    for session_id in await asyncio.to_thread(leases.renew, list(profile.live)):
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
