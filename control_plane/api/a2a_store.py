"""A2A tasks of a profile on PostgreSQL in its database (the SDK's `DatabaseTaskStore`, its table `tasks`,
over psycopg's async driver), so any replica reads them; and the session an A2A request is about (its
message's context, or its task's), by which api/forward.py sends the request to the replica running that
session.

On SQLite (one server process) tasks stay in the process's memory, as before: the SDK's store is async, and
aiosqlite drives the standard sqlite3 module, whose older SQLite (Debian's) cannot read the schema the
store's own SQLite (pysqlite3, store/dbapi.py) writes: "database disk image is malformed".
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from a2a.auth.user import User
from a2a.helpers.proto_helpers import new_text_message
from a2a.server.context import ServerCallContext
from a2a.server.models import TaskModel
from a2a.server.tasks import DatabaseTaskStore, InMemoryTaskStore, TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task, TaskState
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ..store.engine import create_tables
from .profiles import Profile

log = logging.getLogger(__name__)
TABLE = "tasks"
"""The SDK's default table: any other name makes it declare a model per store, and a second store (another
profile) then fails on the table already declared."""
UNFINISHED = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
"""A task in these states has a run that will update it (a task waiting for input has none)."""
CUT_OFF = (
    "the replica running this task's turn stopped before it ended: the turn is interrupted (your message and "
    "its finished steps are kept); send a message in this context to go on"
)


class ProfileUser(User):
    """The caller as the SDK sees it: its profile, which owns its tasks."""

    def __init__(self, profile: str) -> None:
        self.profile = profile

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.profile


class ProfileTasks(TaskStore):
    """The tasks of the caller's profile (the call context's): in its database on PostgreSQL, else here."""

    def __init__(self) -> None:
        self._stores: dict[str, TaskStore] = {}
        self._engines: list[AsyncEngine] = []
        self._here = InMemoryTaskStore()
        """SQLite profiles' tasks (the owner, their profile's name, keeps them apart)."""

    async def _store(self, context: ServerCallContext) -> TaskStore:
        profile: Profile = context.state["profile"]
        name = profile.settings.profile
        if name in self._stores:
            return self._stores[name]
        url = make_url(str(profile.settings.database_url))
        if url.get_backend_name() != "postgresql":
            return self._stores.setdefault(name, self._here)
        # the table under the schema lock, not by the SDK at its first call: replicas starting at once
        # would race its CREATE TABLE (a duplicate key in pg_type); idempotent, so two first calls may both
        await asyncio.to_thread(create_tables, profile.agent.store.engine, [TaskModel.metadata.tables[TABLE]])
        if name not in self._stores:
            engine = create_async_engine(url.set(drivername="postgresql+psycopg"), pool_pre_ping=True)
            self._engines.append(engine)
            self._stores[name] = DatabaseTaskStore(engine, create_table=False)
        return self._stores[name]

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await (await self._store(context)).save(task, context)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        return await (await self._store(context)).get(task_id, context)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        return await (await self._store(context)).list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await (await self._store(context)).delete(task_id, context)

    async def close(self) -> None:
        for engine in self._engines:
            await engine.dispose()

    async def end_cut_off(self, profile: Profile, session_id: str) -> None:
        """The session's turn died with its replica (profiles.py took the session over): its A2A tasks
        that run was to finish, submitted or working, fail with the reason, as its followers were told."""
        context = ServerCallContext(user=ProfileUser(profile.settings.profile), state={"profile": profile})
        try:
            store = await self._store(context)
            for task_id in await asyncio.to_thread(_tasks_of, profile, session_id):
                task = await store.get(task_id, context)
                if task is None or task.status.state not in UNFINISHED:
                    continue
                task.status.state = TaskState.TASK_STATE_FAILED
                task.status.message.CopyFrom(new_text_message(CUT_OFF, task.context_id, task.id))
                task.status.timestamp.GetCurrentTime()
                await store.save(task, context)
        except Exception:  # the database is away: the task keeps its last state, the session is served
            log.exception("session %s: its A2A tasks could not be ended", session_id)


def session_of(profile: Profile, body: bytes) -> str | None:
    """The session a JSON-RPC request of POST /a2a is about: its message's context's, else its task's
    (by the task's context); None for a new context, or a request naming neither."""
    try:
        request = json.loads(body)
    except ValueError:
        return None  # the dispatcher answers it (a parse error)
    params = request.get("params") if isinstance(request, dict) else None
    if not isinstance(params, dict):
        return None
    message = params.get("message")
    context = task = None
    if isinstance(message, dict):
        context = _field(message, "contextId", "context_id")
        task = _field(message, "taskId", "task_id")
    else:
        task = _field(params, "id", "taskId", "task_id")
    if not context and task:
        context = _context_of(profile, task)
    found = profile.agent.bindings.get("a2a", context) if context else None
    return found.session_id if found else None


def _tasks_of(profile: Profile, session_id: str) -> list[str]:
    """The ids of the profile's tasks in the A2A contexts bound to `session_id`."""
    with profile.agent.store.engine.connect() as conn:
        rows = conn.execute(
            text(
                f"SELECT t.id FROM {TABLE} t JOIN conversation_bindings b ON b.surface = 'a2a' "
                "AND b.key = t.context_id AND b.profile = t.owner "
                "WHERE b.session_id = :session AND t.owner = :owner"
            ),
            {"session": session_id, "owner": profile.settings.profile},
        ).scalars()
        return list(rows)


def _field(params: dict[str, Any], *names: str) -> str | None:
    return next((value for name in names if isinstance(value := params.get(name), str) and value), None)


def _context_of(profile: Profile, task_id: str) -> str | None:
    try:
        with profile.agent.store.engine.connect() as conn:
            return conn.execute(  # type: ignore[no-any-return]
                text(f"SELECT context_id FROM {TABLE} WHERE id = :id AND owner = :owner"),
                {"id": task_id, "owner": profile.settings.profile},
            ).scalar()
    except DBAPIError:  # no task was ever stored in this database (the SDK creates its table then)
        return None
