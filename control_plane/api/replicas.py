"""`hermetic serve` as one of several replicas on one PostgreSQL database (store/leases.py): this process's
identity, each profile's leases and shared event stream, and the renewal that keeps them.

A session is held by one replica at a time. A request for it that lands elsewhere is forwarded over HTTP
to the owner (forward.py), which answers it as if it had been sent there: forwarding rather than queueing
in the database, because the caller gets the owner's own answer (started or steered, a 404 for an answered
question, a 429) at the cost of one loopback hop. Events reach followers on any replica through the events
table and its notifications (store/session_events.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from sqlalchemy.engine import make_url

from ..events import Event
from ..store.engine import open_engine
from ..store.leases import Leases
from ..store.mcp_owners import McpOwners
from ..store.session_events import EventTable

log = logging.getLogger(__name__)


@dataclass
class Replica:
    """This process among the replicas: its id, where the others reach it, how long its leases last."""

    address: str
    ttl: float
    id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    loop: asyncio.AbstractEventLoop | None = None
    """The server's event loop (set at startup): where followers wait."""


async def follow_numbered(
    after: int,
    read: Callable[[int], Awaitable[list[tuple[int, Event]]]],
    armed: Callable[[], Callable[[], Awaitable[object]]],
) -> AsyncIterator[tuple[int, Event]]:
    """Numbered events after `after` as `read` finds them, waiting between reads on what `armed` gives
    (armed before each read, so an event arriving during it is never slept through)."""
    while True:
        wait = armed()
        fresh = await read(after)
        if not fresh:
            await wait()
            continue
        for seq, event in fresh:
            after = seq
            yield seq, event


def replicated(url: str) -> bool:
    return make_url(url).get_backend_name() == "postgresql"


class Replication:
    """One profile's leases and events across the replicas on its database."""

    def __init__(self, url: str, replica: Replica) -> None:
        self.replica = replica
        engine = open_engine(url)
        self.leases = Leases(engine, replica.id, replica.ttl)
        self.leases.register(replica.address)
        self.events = EventTable(engine, self.leases)
        self.mcp = McpOwners(engine, replica.id)
        self._followers: dict[str, set[asyncio.Event]] = {}
        from ..store.pg_listener import Listener  # psycopg: only a replica on PostgreSQL loads it

        self._listener = Listener(url, self._woken, self._woken_all)

    @property
    def me(self) -> str:
        return self.replica.id

    def call_soon(self, fn: Callable[..., None], *args: object) -> None:
        """Run `fn` on the server's event loop, from any thread."""
        assert self.replica.loop is not None
        self.replica.loop.call_soon_threadsafe(fn, *args)

    def publish(self, session_id: str, seq: int, event: Event) -> None:
        self.events.put(session_id, seq, event)

    async def follow(self, session_id: str, after: int) -> AsyncIterator[tuple[int, Event]]:
        """The session's events after number `after`, from the table, then each as its notification
        comes: the same on every replica, the owner's included."""
        wake = asyncio.Event()
        self._followers.setdefault(session_id, set()).add(wake)

        def armed() -> Callable[[], Awaitable[object]]:
            wake.clear()  # before reading: a notification during the read ends the next wait
            return wake.wait

        try:
            async for numbered in follow_numbered(
                after, lambda after: asyncio.to_thread(self.events.after, session_id, after), armed
            ):
                yield numbered
        finally:
            waiting = self._followers.get(session_id, set())
            waiting.discard(wake)
            if not waiting:
                self._followers.pop(session_id, None)

    def _woken(self, session_id: str) -> None:
        if session_id in self._followers:
            self.call_soon(self._wake, session_id)

    def _woken_all(self) -> None:
        self.call_soon(self._wake_all)

    def _wake_all(self) -> None:
        for session_id in list(self._followers):
            self._wake(session_id)

    def _wake(self, session_id: str) -> None:
        for wake in self._followers.get(session_id, ()):
            wake.set()

    def close(self) -> None:
        self._listener.close()
        self.events.close()
        try:
            self.mcp.leave()
            self.leases.leave()
        except Exception as exc:  # the database went first: the leases lapse instead
            log.warning("could not give up this replica's leases: %s", exc)
