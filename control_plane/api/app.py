"""The HTTP API: sessions, messages, live events over SSE, and the web console at /. Every route but
/health needs a bearer token or a console sign-in, and it sees only its own profile's sessions
(another profile's are 404, not 403)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path as FilePath
from typing import Annotated, Any, Literal

import httpx
from fastapi import Depends, FastAPI, Header, HTTPException, Path, Query, Request, Response, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from .. import __version__
from ..agent.status import Status
from ..config.settings import Settings, load_settings
from ..events import Question
from ..sandbox_manager import SandboxLimit
from ..store import MessageRecord, SessionRecall, SessionRecord, StoreError
from ..store.semantic import SearchMode
from ..store.tokens import TokenStore
from ..workers import ready_to_serve
from .a2a_routes import a2a_router
from .a2a_store import ProfileTasks
from .batches import router as batches_router
from .bounds import AnswerText, MessageText, Offset, QuestionId, SearchText, SessionId, Title, errors
from .console import ConsoleHeaders, assets
from .console import router as console_router
from .cron import router as cron_router
from .cron import start_schedulers, stop_schedulers
from .evals import router as evals_router
from .files import router as files_router
from .forward import ForwardToOwner, keep_leases
from .mcp_routes import MCP_PATH, McpEndpoint
from .memory import router as memory_router
from .message_keys import forget as forget_key
from .message_keys import seen_before
from .methods import allowed_methods
from .network import router as network_router
from .openai import router as openai_router
from .profiles import Auth, Hub, Live, LiveSession, OptionalAuth, Profile, sandbox_limited
from .replicas import Replica
from .sandboxes import router as sandboxes_router
from .signins import SignInStore
from .skill_sources import router as skill_sources_router
from .skills import router as skills_router
from .snapshots import router as snapshots_router
from .status import router as status_router
from .terminal import router as terminal_router
from .watch import router as watch_router

log = logging.getLogger(__name__)


# -- request and response bodies -------------------------------------------------------------


class NewSession(BaseModel):
    title: Title | None = None


class NewMessage(BaseModel):
    content: MessageText


class Posted(BaseModel):
    status: Literal["started", "steered", "duplicate"]
    """started: a new run; steered: added to the running one after its current tool batch; duplicate:
    its Idempotency-Key was posted to this session before, so nothing was done again."""
    after: int
    """Follow /events?after=this to get exactly this message's events."""


class QuestionAnswer(BaseModel):
    answer: AnswerText
    """One of the question's choices (an approval: once, always, no), or free text when it has none."""


class Health(BaseModel):
    status: str
    version: str
    profile: Status | None = None
    """The caller's profile (with a valid bearer token or console sign-in only)."""


class SessionDetail(BaseModel):
    session: SessionRecord
    messages: list[MessageRecord]
    """The stored history; while a turn runs on this replica, up to that turn (its events tell the rest)."""
    running: bool
    after: int | None = None
    """While a turn runs on this replica: the event number before it. `/events?after=this` replays the
    whole turn, then follows it (the history may not have caught up with its events yet)."""


def create_app(
    root: FilePath | None = None,
    settings_for: Callable[[str], Settings] | None = None,
    replica_address: str | None = None,
) -> FastAPI:
    """The API for every profile under `root` (default: HERMETIC_ROOT or ~/.hermetic). `replica_address`
    (from `hermetic serve`): where other replicas reach this one; a profile on PostgreSQL then shares its
    sessions with them (api/replicas.py)."""
    base = load_settings()
    root = root or base.root
    tokens = TokenStore(root)
    address = base.api.replica_address or replica_address
    replica = Replica(address, base.api.lease_seconds) if address else None
    tasks = ProfileTasks()

    def cut_off(profile: Profile, session_id: str) -> None:  # from a request's or the renewal's thread
        assert replica is not None and replica.loop is not None  # a cut-off turn takes replicas
        asyncio.run_coroutine_threadsafe(tasks.end_cut_off(profile, session_id), replica.loop)

    hub = Hub(settings_for or (lambda name: load_settings(name, root=root)), replica, cut_off)
    forwarding = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0))
    mcp = McpEndpoint(hub, tokens)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await ready_to_serve()
        if base.pool.size:  # warm the default profile's pool before the first session asks
            await asyncio.to_thread(hub.prefill, base.profile)
        await start_schedulers(app, hub, base, root)
        leases = None
        if replica is not None:
            replica.loop = asyncio.get_running_loop()
            await asyncio.to_thread(hub.profile, base.profile)  # joins the replicas, takes over what lapsed
            leases = asyncio.create_task(keep_leases(hub, replica))
        yield
        if leases is not None:
            leases.cancel()
            await asyncio.gather(leases, return_exceptions=True)
        await forwarding.aclose()
        await mcp.close()
        await tasks.close()
        await stop_schedulers(app)
        await asyncio.to_thread(hub.close)

    app = FastAPI(title="Hermetic", version=__version__, lifespan=lifespan)
    if replica is not None:
        app.add_middleware(ForwardToOwner, hub=hub, replica=replica, client=forwarding)
    app.state.hub = hub
    app.state.tokens = tokens
    app.state.signins = SignInStore(root)
    app.state.signin_lifetime = base.api.console_signin_hours * 3600
    app.add_middleware(ConsoleHeaders)
    app.include_router(console_router)
    app.mount("/assets", assets(), name="assets")

    @app.exception_handler(SandboxLimit)  # from any route that needs a sandbox, however deep
    async def too_many_sandboxes(request: Request, exc: SandboxLimit) -> Response:
        return await http_exception_handler(request, sandbox_limited(exc))

    @app.exception_handler(status.HTTP_405_METHOD_NOT_ALLOWED)
    async def method_not_allowed(request: Request, exc: StarletteHTTPException) -> Response:
        allow = allowed_methods(app.router.routes, request.scope)
        headers = {**(exc.headers or {}), **({"Allow": ", ".join(allow)} if allow else {})}
        return await http_exception_handler(request, StarletteHTTPException(405, exc.detail, headers))

    app.include_router(skill_sources_router)  # before /skills/{name}: /skills/outdated is not a name
    app.include_router(skills_router)
    app.include_router(network_router)
    app.include_router(memory_router)
    app.include_router(files_router)
    app.include_router(openai_router)
    app.include_router(cron_router)
    app.include_router(snapshots_router)
    app.include_router(watch_router)
    app.include_router(sandboxes_router)
    app.include_router(terminal_router)
    app.include_router(evals_router)
    app.include_router(batches_router)
    app.include_router(status_router)
    app.include_router(a2a_router(base.profile, tasks))
    app.router.routes.insert(
        0, Route(MCP_PATH, mcp, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    )

    @app.get("/health", openapi_extra={PUBLIC: True})
    async def health(profile: OptionalAuth) -> Health:
        """Liveness for anyone; with a valid token, also the caller's profile status (model, backend,
        memory use, skill count)."""
        status = await asyncio.to_thread(profile.agent.status) if profile is not None else None
        return Health(status="ok", version=__version__, profile=status)

    @app.post("/sessions", status_code=status.HTTP_201_CREATED, responses=errors(400, 401))
    def create_session(profile: Auth, body: NewSession | None = None) -> SessionRecord:
        conversation = profile.agent.new_conversation(title=body.title if body else None, source="api")
        profile.open_session(conversation)
        record = profile.agent.store.get_session(conversation.id, profile.settings.profile)
        assert record is not None
        return record

    @app.get("/sessions", responses=errors(401))
    def list_sessions(
        profile: Auth,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        offset: Annotated[Offset, Query()] = 0,
    ) -> list[SessionRecord]:
        return profile.agent.store.list_sessions(profile.settings.profile, limit=limit, offset=offset)

    @app.get("/sessions/search", responses=errors(401, 409))
    def search_sessions(
        profile: Auth,
        q: Annotated[SearchText, Query()],
        limit: Annotated[int, Query(ge=1, le=100, description="Most sessions")] = 20,
        window: Annotated[int, Query(ge=0, le=10, description="Messages either side of each match")] = 1,
        mode: Annotated[
            SearchMode, Query(description="hybrid: words and meaning; keyword: every word; semantic: meaning")
        ] = "hybrid",
    ) -> list[SessionRecall]:
        """The sessions best matching `q`, one entry each (as the session_search tool sees them)."""
        try:
            return profile.agent.store.recall(
                profile.settings.profile, q, limit=limit, window=window, mode=mode
            )
        except StoreError as exc:  # semantic search while it is off, or the query failing to embed
            raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None

    @app.get("/sessions/{session_id}", responses=errors(401, 404))
    def get_session(profile: Auth, session_id: Annotated[SessionId, Path()]) -> SessionDetail:
        """The session and its history, from the database (answered by any replica)."""
        record = _own(profile, session_id)
        live = profile.live.get(session_id)
        running = bool(live and live.conversation.running)
        if profile.replication is not None and live is None:
            holder = profile.replication.leases.holder(session_id)
            running = bool(holder and holder.running)
        messages = profile.agent.store.messages(session_id)
        if running and live is not None and live.turn is not None:
            after, started = live.turn
            before = [m for m in messages if m.created_at < started]
            return SessionDetail(session=record, messages=before, running=True, after=after)
        return SessionDetail(session=record, messages=messages, running=running)

    @app.post(
        "/sessions/{session_id}/messages",
        status_code=status.HTTP_202_ACCEPTED,
        responses=errors(400, 401, 404, 429),
    )
    async def post_message(
        profile: Auth,
        live: Live,
        body: NewMessage,
        key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=64)] = None,
    ) -> Posted:
        """Send the session a message: a new turn, or steered into the running one. A client that cannot
        tell whether a post was taken (the connection broke, a replica died) sends it again with the same
        `Idempotency-Key`: taken before, it is answered `duplicate` and nothing runs twice."""
        async with live.posting:  # a post and its copy under the same key: one after the other
            after = live.seq
            if key is not None and await asyncio.to_thread(seen_before, profile, live, key, body.content):
                return Posted(status="duplicate", after=after)
            try:
                if live.conversation.steer(body.content):
                    return Posted(status="steered", after=after)
                if live.task is not None and not live.task.done():  # its reply is in, only saving: a new turn
                    await asyncio.gather(live.task, return_exceptions=True)
                profile.start_turn(live, body.content)
            except BaseException:  # not taken (a 429 over limits): the same key may be posted again
                if key is not None:
                    await asyncio.to_thread(forget_key, profile, live, key)
                raise
            return Posted(status="started", after=after)

    @app.post("/sessions/{session_id}/interrupt", responses=errors(401, 404))
    def interrupt(live: Live) -> dict[str, bool]:
        return {"interrupted": live.conversation.interrupt()}

    @app.get("/sessions/{session_id}/questions", responses=errors(401, 404))
    def open_questions(live: Live) -> list[Question]:
        """The questions the running turn waits on (also sent as `question` events)."""
        return live.conversation.questions.open()

    @app.post(
        "/sessions/{session_id}/questions/{question_id}",
        responses=errors(400, 401, 404),
    )
    def answer_question(
        live: Live, question_id: Annotated[QuestionId, Path()], body: QuestionAnswer
    ) -> dict[str, bool]:
        """Answer a question of the running turn (a clarification, an approval) by its id; an answer
        that is not one of its choices is a 422 on `body.answer`."""
        try:
            answered = live.conversation.answer(question_id, body.answer)
        except ValueError as exc:  # FastAPI's own 422 body, as documented, not an ErrorBody
            error = {"type": "value_error", "loc": ("body", "answer"), "msg": str(exc), "input": body.answer}
            raise RequestValidationError([error]) from None
        if not answered:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND, f"no open question {question_id} (answered or timed out)"
            )
        return {"answered": True}

    @app.post("/sessions/{session_id}/close", responses=errors(401, 404))
    async def close_session(profile: Auth, live: Live) -> dict[str, bool]:
        """End the session: its sandbox is released (the history stays)."""
        if live.task is not None and not live.task.done():
            live.conversation.interrupt()
            await asyncio.gather(live.task, return_exceptions=True)
        await asyncio.to_thread(live.conversation.close)
        await asyncio.to_thread(profile.release, live.conversation.id)
        return {"closed": True}

    @app.get("/sessions/{session_id}/events", response_class=EventSourceResponse, responses=errors(401, 404))
    async def events(
        profile: Auth,
        session_id: Annotated[SessionId, Path()],
        live: Annotated[LiveSession | None, Depends(_followed)],
        after: Annotated[Offset | None, Query(description="Only events after this number")] = None,
        until_turn_end: Annotated[bool, Query(description="Stop after the next turn_end")] = False,
        last_event_id: Annotated[str | None, Header(max_length=32)] = None,
    ) -> AsyncIterator[ServerSentEvent]:
        """The session's events as they happen: each SSE `event` is the event's type, `id` its number.
        With replicas, followed from the database on whichever replica the request lands."""
        if after is None and last_event_id and last_event_id.isdigit():  # a reconnecting browser
            after = int(last_event_id)
        if live is not None:
            following = live.follow(live.seq if after is None else after)
        else:
            assert profile.replication is not None
            if after is None:  # a new follower starts from now
                after = await asyncio.to_thread(profile.replication.events.last_seq, session_id)
            following = profile.replication.follow(session_id, after)
        async for seq, event in following:
            yield ServerSentEvent(data=event.model_dump(), event=event.type, id=str(seq))
            if until_turn_end and event.type == "turn_end":
                return

    app.openapi = _public_marked(app.openapi)  # type: ignore[method-assign]
    return app


def _followed(profile: Auth, session_id: Annotated[SessionId, Path()]) -> LiveSession | None:
    """The session whose events are followed: live here, or (None) with replicas, followed from the
    database. A dependency, so a 404 is sent before an SSE response has started."""
    if profile.replication is None:
        return profile.session(session_id)
    _own(profile, session_id)
    return None


def _own(profile: Profile, session_id: str) -> SessionRecord:
    """The profile's session record; 404 when it has none of that id."""
    record = profile.agent.store.get_session(session_id, profile.settings.profile)
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no session {session_id}")
    return record


PUBLIC = "x-hermetic-public"
"""Marks an operation that needs no token (a token only adds to its answer): its `security` becomes []."""


def _public_marked(openapi: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    """FastAPI's document, with `security: []` on the operations marked PUBLIC (FastAPI lists an optional
    bearer scheme as a requirement, and appends a list given in `openapi_extra` instead of replacing it)."""
    marked: list[dict[str, Any]] = []

    def document() -> dict[str, Any]:
        if not marked:
            marked.append(openapi())
            for operations in marked[0]["paths"].values():
                for operation in operations.values():
                    if operation.pop(PUBLIC, False):
                        operation["security"] = []
        return marked[0]

    return document
