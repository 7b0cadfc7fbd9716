"""The profiles this server has open (each its agent and live sessions), and the one auth dependency
that gives a route the caller's profile (a bearer token or a console sign-in cookie)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Path, Request, WebSocket, status
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer

from backends import SandboxError

from ..agent.agent import Agent
from ..agent.loop import Conversation
from ..config.settings import Settings
from ..events import Event, Notice, TurnEnd
from ..sandbox_manager import SandboxLimit
from . import conversation_keys
from .bounds import SessionId
from .replicas import Replica, Replication, follow_numbered, replicated
from .signins import COOKIE, CSRF_HEADER, csrf_ok, same_origin

log = logging.getLogger(__name__)
KEPT_EVENTS = 2000
"""Events a live session keeps for clients that connect late or reconnect (Last-Event-ID)."""
RETRY_RUNNING = 5
"""Retry-After when too many sessions run: a turn with the usual tools ends within seconds."""
RETRY_SANDBOX = 30
"""Retry-After when too many sandboxes are held: they free up as sessions close or go idle."""
CutOff = Callable[["Profile", str], None]
"""Told of a profile's session whose turn died with its replica (Profile.on_cut_off)."""


class LiveSession:
    """A conversation open in this server, with its numbered events for any number of followers."""

    def __init__(
        self,
        conversation: Conversation,
        seq: int = 0,
        shared: Callable[[str, int, Event], None] | None = None,
    ) -> None:
        self.conversation = conversation
        self.events: deque[tuple[int, Event]] = deque(maxlen=KEPT_EVENTS)
        self.seq = seq
        """The last event's number: with replicas, where the previous owner's numbering stopped."""
        self._shared = shared
        """With replicas: where each event also goes, for followers on every replica."""
        self._wake = asyncio.Event()
        self.task: asyncio.Task[Any] | None = None
        self.turn: tuple[int, float] | None = None
        """The latest turn started here: the event number before its first event, and when it began."""
        self.followers = 0
        self.posting = asyncio.Lock()
        """Held while a posted message is checked (its idempotency key) and taken."""

    def publish(self, event: Event) -> None:
        """Called on the event loop: number the event and wake every follower."""
        self.seq += 1
        self.events.append((self.seq, event))
        if self._shared is not None:
            self._shared(self.conversation.id, self.seq, event)
        self._wake.set()
        self._wake = asyncio.Event()

    @property
    def running(self) -> bool:
        """A run was started and has not ended (true from the moment it is started, unlike the
        conversation's own flag, which its task sets once it begins)."""
        return self.task is not None and not self.task.done()

    @property
    def idle(self) -> bool:
        """Nothing would notice if this server let go of it: no run, no follower, no open question."""
        return not self.running and not self.followers and not self.conversation.questions.open()

    async def follow(self, after: int) -> AsyncIterator[tuple[int, Event]]:
        """Events after number `after` (one past what this server numbered, e.g. before a restart:
        from now), then each as it comes."""
        self.followers += 1

        async def read(after: int) -> list[tuple[int, Event]]:
            return self._after(after)

        try:
            async for numbered in follow_numbered(min(after, self.seq), read, lambda: self._wake.wait):
                yield numbered
        finally:
            self.followers -= 1

    def _after(self, after: int) -> list[tuple[int, Event]]:
        """The kept events numbered after `after`, oldest first. Read from the newest back: a follower's
        wake costs its new events, not a scan of all KEPT_EVENTS (once per streamed chunk)."""
        newer = itertools.takewhile(lambda kept: kept[0] > after, reversed(self.events))
        return list(newer)[::-1]


def _ended(last: dict[str, Any]) -> list[Event]:
    """How a turn cut short by its replica's death ends for its followers: done when its final answer
    was saved (only the end was not sent: the user must not ask again), else interrupted."""
    if last.get("role") == "assistant" and not last.get("tool_calls"):
        return [TurnEnd(reason="done", content=last.get("content") or "")]
    why = (
        "the replica running this session's turn stopped before it ended: the turn is interrupted "
        "(your message and its finished steps are kept); send a message to go on"
    )
    return [Notice(message=why), TurnEnd(reason="interrupted")]


def _too_many(message: str, retry_after: int) -> HTTPException:
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS, message, headers={"Retry-After": str(retry_after)}
    )


def sandbox_limited(exc: SandboxLimit) -> HTTPException:
    """What any route answers when the sandbox it needs is over limits.max_sandboxes (the app's
    exception handler, for every route at once): 429 with Retry-After."""
    return _too_many(str(exc), RETRY_SANDBOX)


class Profile:
    """One profile's agent and its sessions open in this server."""

    def __init__(
        self, settings: Settings, replica: Replica | None = None, on_cut_off: CutOff | None = None
    ) -> None:
        self.settings = settings
        self.on_cut_off = on_cut_off
        """Told (from any thread) of each session whose turn this replica found cut off by its replica's
        death, once its followers were: what keeps its own state of a turn (A2A's tasks) ends it too."""
        self.agent = Agent(settings)
        conversation_keys.take_over(settings.home, self.agent.bindings)
        self.live: dict[str, LiveSession] = {}
        """Sessions held in memory, least recently used first."""
        url = str(settings.database_url)
        self.replication = Replication(url, replica) if replica and replicated(url) else None
        """With PostgreSQL under `hermetic serve`: the leases and events shared with other replicas."""
        if self.replication is not None:  # a turn that lost its lease saves nothing more
            self.agent.store.fence = self.replication.leases.fence

    def session(self, session_id: str) -> LiveSession:
        """The live session, resumed from the database if needed. 404 when not this profile's; 409 when
        another replica holds it (a request is forwarded to the owner before it gets here: a race)."""
        live = self.live.get(session_id)
        if live is None:
            live = self._resume(session_id)
        return self.keep(live)

    def open_session(self, conversation: Conversation) -> LiveSession:
        """Hold a new conversation (with replicas: under this replica's lease)."""
        if self.replication is not None:
            self.replication.leases.claim(conversation.id)
        return self.keep(self._live(conversation, 0))

    def _resume(self, session_id: str) -> LiveSession:
        replication = self.replication
        holder = replication.leases.claim(session_id) if replication is not None else None
        if replication is not None and holder is not None and holder.owner != replication.me:
            raise HTTPException(
                status.HTTP_409_CONFLICT, f"session {session_id} is held by replica {holder.owner}; try again"
            )
        try:
            conversation = self.agent.resume(session_id)
        except KeyError:
            if replication is not None:
                replication.leases.release(session_id)
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no session {session_id}") from None
        if replication is None:
            return LiveSession(conversation)
        live = self._live(conversation, replication.events.last_seq(session_id))
        if holder is not None and holder.running:  # its replica died mid-turn: that turn is over
            replication.leases.set_running(session_id, False)
            for event in _ended(conversation.history[-1]):
                replication.call_soon(live.publish, event)
            if self.on_cut_off is not None:
                self.on_cut_off(self, session_id)
        return live

    def _live(self, conversation: Conversation, seq: int) -> LiveSession:
        shared = self.replication.publish if self.replication is not None else None
        return LiveSession(conversation, seq, shared)

    def keep(self, live: LiveSession) -> LiveSession:
        """Hold `live` as the most recently used session. Over limits.max_live_sessions, the least recently
        used idle ones are let go: their history is in the database and the next request resumes them."""
        self.live.pop(live.conversation.id, None)
        self.live[live.conversation.id] = live
        excess = len(self.live) - self.settings.limits.max_live_sessions
        if excess > 0:  # not on every request: the copy below is as long as the dict
            for key, other in list(self.live.items()):
                if excess <= 0:
                    break
                if other is not live and other.idle:
                    del self.live[key]
                    excess -= 1
        return live

    def admit_run(self, live: LiveSession) -> None:
        """Refuse (429, Retry-After) a new run over the profile's limits on running sessions and sandboxes;
        a running session counts as holding a sandbox, since its run may start one."""
        limits = self.settings.limits
        running = {other.conversation.id for other in self.live.values() if other.running}
        if len(running) >= limits.max_running_sessions:
            raise _too_many(
                f"this profile already has {len(running)} sessions running a turn "
                f"(limits.max_running_sessions); wait for one to finish",
                RETRY_RUNNING,
            )
        holding = self.agent.sandboxes.held() | running
        if live.conversation.id not in holding and len(holding) >= limits.max_sandboxes:
            raise _too_many(
                f"this profile's sessions already hold {len(holding)} sandboxes (limits.max_sandboxes); "
                "close a session (POST /sessions/ID/close) or wait for an idle one to be closed",
                RETRY_SANDBOX,
            )

    def start_turn(self, live: LiveSession, text: str) -> None:
        """Start a turn of `live` in the background, within the profile's limits (429 past them)."""
        self.admit_run(live)
        if self.replication is not None:  # before the caller is told it started: a replica dying after
            # that must leave a lease that says so, for the one taking it over to end the turn
            self.replication.leases.set_running(live.conversation.id, True)
        live.turn = (live.seq, time.time())
        live.task = asyncio.create_task(self._run(live, text))

    async def _run(self, live: LiveSession, text: str) -> TurnEnd:
        """The turn; with replicas, marked running in its lease while it lasts (from start_turn), so that
        a replica taking the lease over after this one died knows the turn was cut short."""
        replication, session_id = self.replication, live.conversation.id
        if replication is None:
            return await live.conversation.run(text, live.publish)
        try:
            return await live.conversation.run(text, live.publish)
        finally:
            if not await asyncio.to_thread(replication.leases.set_running, session_id, False):
                log.warning(
                    "session %s: its turn here ended after another replica took the session over "
                    "(nothing of it was saved or sent from then on)",
                    session_id,
                )

    def release(self, session_id: str) -> None:
        """Let go of a session this server held (closed, or its lease lost)."""
        self.live.pop(session_id, None)
        if self.replication is not None:
            self.replication.leases.release(session_id)

    def close(self) -> None:
        for live in self.live.values():
            if live.task is not None:
                live.conversation.interrupt()
        self.agent.close()
        if self.replication is not None:
            self.replication.close()


class Hub:
    """Profiles by name, each opened on first use with its own home, database and sandboxes."""

    def __init__(
        self,
        settings_for: Callable[[str], Settings],
        replica: Replica | None = None,
        on_cut_off: CutOff | None = None,
    ) -> None:
        self.settings_for = settings_for
        self.replica = replica
        self.on_cut_off = on_cut_off
        self.profiles: dict[str, Profile] = {}
        self._opening = threading.Lock()

    def profile(self, name: str) -> Profile:
        """The profile, opened once however many requests ask for it first at the same time (routes
        run in threads: two would each open an agent and its store, one left running unseen, and two
        stores creating one database at once could fail a request)."""
        found = self.profiles.get(name)
        if found is not None:
            return found
        with self._opening:
            if name not in self.profiles:
                self.profiles[name] = Profile(self.settings_for(name), self.replica, self.on_cut_off)
            return self.profiles[name]

    def prefill(self, name: str) -> None:
        """Open the profile and start its warm pool; a backend that cannot start now is only logged."""
        try:
            self.profile(name).agent.sandboxes.prefill()
        except SandboxError as exc:
            log.warning("profile %s: no warm pool at startup: %s", name, exc)

    def close(self) -> None:
        for profile in self.profiles.values():
            profile.close()


_bearer = HTTPBearer(auto_error=False)
_signin_cookie = APIKeyCookie(name=COOKIE, auto_error=False, description="A console sign-in (/auth/login)")
Bearer = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
Cookie = Annotated[str | None, Depends(_signin_cookie)]
_UNAUTHORIZED = "a valid bearer token is required (create one: hermetic token create --profile NAME)"
_NO_CSRF = f"a console sign-in needs a same-origin request with its {CSRF_HEADER} header to change anything"


def caller(request: Request, creds: HTTPAuthorizationCredentials | None, cookie: str | None) -> str | None:
    """The profile of the request's bearer token or, without one, of its console sign-in cookie (one
    way in for every route). A cookie on a state-changing request without its CSRF token is a 401."""
    tokens = request.app.state.tokens
    if creds is not None:
        return tokens.profile_of(creds.credentials)  # type: ignore[no-any-return]
    found = request.app.state.signins.get(cookie) if cookie else None
    if found is None:
        return None
    signin, token = found
    if not csrf_ok(request, signin):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, _NO_CSRF)
    return tokens.profile_of_digest(token)  # type: ignore[no-any-return]


def current_profile(request: Request, creds: Bearer, cookie: Cookie) -> Profile:
    profile = caller(request, creds, cookie)
    if profile is None:
        challenge = {"WWW-Authenticate": "Bearer"}
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, _UNAUTHORIZED, headers=challenge)
    hub: Hub = request.app.state.hub
    return hub.profile(profile)


Auth = Annotated[Profile, Depends(current_profile)]


def optional_profile(request: Request, creds: Bearer, cookie: Cookie) -> Profile | None:
    """The caller's profile when the request carries a valid token or sign-in, else None (never a 401)."""
    try:
        name = caller(request, creds, cookie)
    except HTTPException:
        return None
    return request.app.state.hub.profile(name) if name else None


OptionalAuth = Annotated[Profile | None, Depends(optional_profile)]


def websocket_profile(websocket: WebSocket) -> Profile | None:
    """The profile of a WebSocket handshake's bearer token or console sign-in cookie, else None. CORS
    does not apply to WebSockets and a browser sends the cookie from any page of the same site (another
    port on 127.0.0.1 is one), so the cookie counts only with this server's own Origin, which browsers
    always send on a WebSocket handshake (cross-site WebSocket hijacking)."""
    tokens = websocket.app.state.tokens
    scheme, _, credentials = websocket.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        name = tokens.profile_of(credentials.strip())
    else:
        cookie = websocket.cookies.get(COOKIE)
        found = websocket.app.state.signins.get(cookie) if cookie else None
        browser_here = "origin" in websocket.headers and same_origin(websocket)
        name = tokens.profile_of_digest(found[1]) if found and browser_here else None
    return websocket.app.state.hub.profile(name) if name else None


def live_session(profile: Auth, session_id: Annotated[SessionId, Path()]) -> LiveSession:
    # a dependency, so a 404 is sent before an SSE response has started
    return profile.session(session_id)


Live = Annotated[LiveSession, Depends(live_session)]
