"""The HTTP API: sessions, messages, live events over SSE. Every route but /health needs a bearer
token, and a token sees only its own profile's sessions (another profile's are 404, not 403)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Query, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, Field

from backends import SandboxError

from . import __version__
from .agent import Agent, Conversation
from .api_tokens import TokenStore
from .events import Event
from .settings import Settings, load_settings
from .store import MessageRecord, SessionRecall, SessionRecord

log = logging.getLogger(__name__)
KEPT_EVENTS = 2000
"""Events a live session keeps for clients that connect late or reconnect (Last-Event-ID)."""


class LiveSession:
    """A conversation open in this server, with its numbered events for any number of followers."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.events: deque[tuple[int, Event]] = deque(maxlen=KEPT_EVENTS)
        self.seq = 0
        self._wake = asyncio.Event()
        self.task: asyncio.Task[Any] | None = None

    def publish(self, event: Event) -> None:
        """Called on the event loop: number the event and wake every follower."""
        self.seq += 1
        self.events.append((self.seq, event))
        self._wake.set()
        self._wake = asyncio.Event()

    async def follow(self, after: int) -> AsyncIterator[tuple[int, Event]]:
        while True:
            wake = self._wake
            fresh = [(seq, event) for seq, event in self.events if seq > after]
            if not fresh:
                await wake.wait()
                continue
            for seq, event in fresh:
                after = seq
                yield seq, event


class Profile:
    """One profile's agent and its sessions open in this server."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.agent = Agent(settings)
        self.live: dict[str, LiveSession] = {}

    def session(self, session_id: str) -> LiveSession:
        """The live session, resumed from the database if needed. 404 when not this profile's."""
        live = self.live.get(session_id)
        if live is None:
            try:
                live = LiveSession(self.agent.resume(session_id))
            except KeyError:
                raise HTTPException(status.HTTP_404_NOT_FOUND, f"no session {session_id}") from None
            self.live[session_id] = live
        return live

    def close(self) -> None:
        for live in self.live.values():
            if live.task is not None:
                live.conversation.interrupt()
        self.agent.close()


class Hub:
    """Profiles by name, each opened on first use with its own home, database and sandboxes."""

    def __init__(self, settings_for: Callable[[str], Settings]) -> None:
        self.settings_for = settings_for
        self.profiles: dict[str, Profile] = {}

    def profile(self, name: str) -> Profile:
        if name not in self.profiles:
            self.profiles[name] = Profile(self.settings_for(name))
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


# -- request and response bodies -------------------------------------------------------------


class NewSession(BaseModel):
    title: str | None = Field(None, max_length=200)


class NewMessage(BaseModel):
    content: str = Field(min_length=1, max_length=200_000)


class Posted(BaseModel):
    status: str
    """started: a new run; steered: added to the running one after its current tool batch."""
    after: int
    """Follow /events?after=this to get exactly this message's events."""


class SessionDetail(BaseModel):
    session: SessionRecord
    messages: list[MessageRecord]
    running: bool


_bearer = HTTPBearer(auto_error=False)


def current_profile(
    request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Profile:
    profile = request.app.state.tokens.profile_of(creds.credentials) if creds else None
    if profile is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "a valid bearer token is required (create one: hermetic token create --profile NAME)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    hub: Hub = request.app.state.hub
    return hub.profile(profile)


Auth = Annotated[Profile, Depends(current_profile)]


def live_session(profile: Auth, session_id: str) -> LiveSession:
    # a dependency, so a 404 is sent before an SSE response has started
    return profile.session(session_id)


Live = Annotated[LiveSession, Depends(live_session)]


def create_app(root: Path | None = None, settings_for: Callable[[str], Settings] | None = None) -> FastAPI:
    """The API for every profile under `root` (default: HERMETIC_ROOT or ~/.hermetic)."""
    base = load_settings()
    root = root or base.root
    tokens = TokenStore(root)
    hub = Hub(settings_for or (lambda name: load_settings(name, root=root)))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if base.pool.size:  # warm the default profile's pool before the first session asks
            await asyncio.to_thread(hub.prefill, base.profile)
        yield
        await asyncio.to_thread(hub.close)

    app = FastAPI(title="Hermetic", version=__version__, lifespan=lifespan)
    app.state.hub = hub
    app.state.tokens = tokens
    from .skills.api import router as skills_router  # here: it imports this module's auth dependency

    app.include_router(skills_router)

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.post("/sessions", status_code=status.HTTP_201_CREATED)
    def create_session(profile: Auth, body: NewSession | None = None) -> SessionRecord:
        conversation = profile.agent.new_conversation(title=body.title if body else None, source="api")
        profile.live[conversation.id] = LiveSession(conversation)
        record = profile.agent.store.get_session(conversation.id, profile.settings.profile)
        assert record is not None
        return record

    @app.get("/sessions")
    def list_sessions(
        profile: Auth,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> list[SessionRecord]:
        return profile.agent.store.list_sessions(profile.settings.profile, limit=limit, offset=offset)

    @app.get("/sessions/search")
    def search_sessions(
        profile: Auth,
        q: Annotated[str, Query(min_length=1)],
        limit: Annotated[int, Query(ge=1, le=100, description="Most sessions")] = 20,
        window: Annotated[int, Query(ge=0, le=10, description="Messages either side of each match")] = 1,
    ) -> list[SessionRecall]:
        """The sessions best matching `q`, one entry each (as the session_search tool sees them)."""
        return profile.agent.store.recall(profile.settings.profile, q, limit=limit, window=window)

    @app.get("/sessions/{session_id}")
    def get_session(profile: Auth, session_id: str) -> SessionDetail:
        record = profile.agent.store.get_session(session_id, profile.settings.profile)
        if record is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no session {session_id}")
        live = profile.live.get(session_id)
        return SessionDetail(
            session=record,
            messages=profile.agent.store.messages(session_id),
            running=bool(live and live.conversation.running),
        )

    @app.post("/sessions/{session_id}/messages", status_code=status.HTTP_202_ACCEPTED)
    async def post_message(live: Live, body: NewMessage) -> Posted:
        after = live.seq
        if live.conversation.steer(body.content):
            return Posted(status="steered", after=after)
        live.task = asyncio.create_task(live.conversation.run(body.content, live.publish))
        return Posted(status="started", after=after)

    @app.post("/sessions/{session_id}/interrupt")
    def interrupt(live: Live) -> dict[str, bool]:
        return {"interrupted": live.conversation.interrupt()}

    @app.post("/sessions/{session_id}/close")
    async def close_session(profile: Auth, live: Live) -> dict[str, bool]:
        """End the session: its sandbox is released (the history stays)."""
        if live.task is not None and not live.task.done():
            live.conversation.interrupt()
            await asyncio.gather(live.task, return_exceptions=True)
        await asyncio.to_thread(live.conversation.close)
        profile.live.pop(live.conversation.id, None)
        return {"closed": True}

    @app.get("/sessions/{session_id}/events", response_class=EventSourceResponse)
    async def events(
        live: Live,
        after: Annotated[int | None, Query(ge=0, description="Only events after this number")] = None,
        until_turn_end: Annotated[bool, Query(description="Stop after the next turn_end")] = False,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> AsyncIterator[ServerSentEvent]:
        """The session's events as they happen: each SSE `event` is the event's type, `id` its number."""
        if after is None:  # a reconnecting browser says where it was; a new follower starts from now
            after = int(last_event_id) if last_event_id and last_event_id.isdigit() else live.seq
        async for seq, event in live.follow(after):
            yield ServerSentEvent(data=event.model_dump(), event=event.type, id=str(seq))
            if until_turn_end and event.type == "turn_end":
                return

    return app
