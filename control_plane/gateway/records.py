"""The gateway's tables in the sessions database: inbound messages (stored before the platform is
acknowledged), chat -> session, per-platform state (Telegram's offset), the bot-token locks, and who
may talk to the agent (admitted users, pending pairing codes)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Connection,
    UniqueConstraint,
    delete,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, SQLModel, col

from ..store.engine import open_engine, write_transaction


class GatewayLocked(RuntimeError):
    """Another gateway holds this bot token (one gateway per token): its lock is a row of this store."""


class InboundRecord(SQLModel, table=True):
    """One message from a platform, stored before the platform is told it arrived."""

    __tablename__ = "gateway_inbound"
    __table_args__ = (UniqueConstraint("platform", "chat", "message_id"), {"sqlite_autoincrement": True})

    id: int | None = Field(default=None, primary_key=True)
    platform: str
    chat: str
    message_id: str
    """The platform's id of the message: a redelivery has the same one."""
    payload: dict[str, Any] = Field(sa_column=Column(JSON))
    """The platform-neutral message (gateway.base.Inbound) as JSON."""
    state: str = "new"
    """new, running, replying (the whole reply is being sent, on a platform that cannot edit it),
    answered (or steered into a run that answered), refused."""
    session_id: str | None = None
    reply_id: str | None = None
    """The platform id of our reply's first message, once sent: a rerun after a crash edits it."""
    received_at: float


class StateRecord(SQLModel, table=True):
    __tablename__ = "gateway_state"

    key: str = Field(primary_key=True)
    value: str


class LockRecord(SQLModel, table=True):
    """One running gateway per bot token, across processes and machines."""

    __tablename__ = "gateway_locks"

    name: str = Field(primary_key=True)
    holder: str
    host: str
    pid: int
    expires_at: float


class AdmittedRecord(SQLModel, table=True):
    __tablename__ = "gateway_admitted"

    platform: str = Field(primary_key=True)
    user: str = Field(primary_key=True)
    admitted_at: float


class PairingRecord(SQLModel, table=True):
    __tablename__ = "gateway_pairing"

    code: str = Field(primary_key=True)
    platform: str
    user: str
    name: str = ""
    created_at: float
    expires_at: float


_TABLES = [
    SQLModel.metadata.tables[name]
    for name in (
        "gateway_inbound",
        "gateway_state",
        "gateway_locks",
        "gateway_admitted",
        "gateway_pairing",
    )
]
HOST = socket.gethostname()


class GatewayStore:
    """Thread-safe like the sessions Store; the same database (SQLite or PostgreSQL)."""

    def __init__(self, url: str) -> None:
        self._engine = open_engine(url)
        with self._write() as conn:
            SQLModel.metadata.create_all(conn, tables=_TABLES, checkfirst=True)

    def close(self) -> None:
        self._engine.dispose()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with write_transaction(self._engine) as conn:
            yield conn

    # -- inbound messages ------------------------------------------------------------------

    def receive(self, platform: str, chat: str, message_id: str, payload: dict[str, Any]) -> int | None:
        """Store a message; its row id, or None when it was stored before (a redelivery)."""
        row = {"platform": platform, "chat": chat, "message_id": message_id, "payload": payload}
        try:
            with self._write() as conn:
                done = conn.execute(
                    insert(InboundRecord).returning(col(InboundRecord.id)), row | {"received_at": time.time()}
                )
                return int(done.scalar_one() or 0)
        except IntegrityError:
            return None

    def mark(self, inbound_id: int, **fields: Any) -> None:
        """Set state, session_id or reply_id of a stored message."""
        with self._write() as conn:
            conn.execute(update(InboundRecord).where(col(InboundRecord.id) == inbound_id).values(fields))

    def inbound(self, inbound_id: int) -> InboundRecord | None:
        with self._engine.connect() as conn:
            row = conn.execute(select(InboundRecord).where(col(InboundRecord.id) == inbound_id)).first()
        return InboundRecord.model_validate(row._mapping) if row else None

    def find(self, platform: str, chat: str, message_id: str) -> InboundRecord | None:
        """A stored message by its platform id."""
        query = select(InboundRecord).where(
            col(InboundRecord.platform) == platform,
            col(InboundRecord.chat) == chat,
            col(InboundRecord.message_id) == message_id,
        )
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        return InboundRecord.model_validate(row._mapping) if row else None

    def unanswered(self, platform: str) -> list[InboundRecord]:
        """Messages stored but never answered (the gateway stopped or crashed first), oldest first."""
        query = (
            select(InboundRecord)
            .where(
                col(InboundRecord.platform) == platform,
                col(InboundRecord.state).in_(["new", "running", "replying"]),
            )
            .order_by(col(InboundRecord.id))
        )
        with self._engine.connect() as conn:
            return [InboundRecord.model_validate(row._mapping) for row in conn.execute(query)]

    def latest_per_chat(self, platform: str) -> list[InboundRecord]:
        """The last message stored in each chat (each thread apart): where a backfill resumes."""
        thread = col(InboundRecord.payload)["thread"].as_string()
        latest = (
            select(func.max(col(InboundRecord.id)))
            .where(col(InboundRecord.platform) == platform)
            .group_by(col(InboundRecord.chat), thread)
        )
        query = select(InboundRecord).where(col(InboundRecord.id).in_(latest)).order_by(col(InboundRecord.id))
        with self._engine.connect() as conn:
            return [InboundRecord.model_validate(row._mapping) for row in conn.execute(query)]

    def counts_since(self, platform: str, since: float) -> tuple[int, int]:
        """The platform's messages stored since `since`, and how many of them are answered."""
        answered = func.count().filter(col(InboundRecord.state) == "answered")
        query = select(func.count(), answered).where(
            col(InboundRecord.platform) == platform, col(InboundRecord.received_at) >= since
        )
        with self._engine.connect() as conn:
            row = conn.execute(query).one()
        return int(row[0]), int(row[1])

    def last_inbound(self, platform: str, chat: str | None = None) -> InboundRecord | None:
        """The platform's (or one chat's) last stored message."""
        query = select(InboundRecord).where(col(InboundRecord.platform) == platform)
        if chat is not None:
            query = query.where(col(InboundRecord.chat) == chat)
        query = query.order_by(col(InboundRecord.id).desc()).limit(1)
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        return InboundRecord.model_validate(row._mapping) if row else None

    # -- chats and sessions ------------------------------------------------------------------

    def take_over_chats(self) -> list[tuple[str, str, float, float]]:
        """The chat -> session table of releases before the store's bindings (store/bindings.py), oldest
        first, for the gateway to bind again; [] when there is none. `drop_chats` removes it after."""
        if "gateway_chats" not in inspect(self._engine).get_table_names():
            return []
        with self._engine.connect() as conn:
            rows = conn.execute(
                text("SELECT key, session_id, started_at, last_at FROM gateway_chats ORDER BY started_at")
            ).all()
        return [(str(k), str(s), float(started), float(last)) for k, s, started, last in rows]

    def drop_chats(self) -> None:
        with self._write() as conn:
            conn.execute(text("DROP TABLE IF EXISTS gateway_chats"))

    # -- state -------------------------------------------------------------------------------

    def get_state(self, key: str) -> str | None:
        with self._engine.connect() as conn:
            return conn.scalar(select(col(StateRecord.value)).where(col(StateRecord.key) == key))

    def set_state(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute(delete(StateRecord).where(col(StateRecord.key) == key))
            conn.execute(insert(StateRecord).values(key=key, value=value))

    # -- locks -------------------------------------------------------------------------------

    def acquire(self, name: str, holder: str, ttl: float) -> LockRecord | None:
        """Take the lock `name` for `holder`; None when taken, else the record of whoever holds it.
        A lock past its expiry, or held by a dead process on this host, is taken over."""
        now = time.time()
        try:
            with self._write() as conn:
                row = conn.execute(select(LockRecord).where(col(LockRecord.name) == name)).first()
                if row is not None:
                    held = LockRecord.model_validate(row._mapping)
                    if held.holder != holder and held.expires_at > now and not _dead_here(held):
                        return held
                    conn.execute(delete(LockRecord).where(col(LockRecord.name) == name))
                mine = {"name": name, "holder": holder, "host": HOST, "pid": os.getpid()}
                conn.execute(insert(LockRecord).values(mine | {"expires_at": now + ttl}))
        except IntegrityError:  # another process inserted it between our read and our write
            return self.lock(name) or LockRecord(name=name, holder="?", host="?", pid=0, expires_at=now)
        return None

    def renew(self, name: str, holder: str, ttl: float) -> bool:
        """Push the lock's expiry on; False when it is no longer ours."""
        with self._write() as conn:
            done = conn.execute(
                update(LockRecord)
                .where(col(LockRecord.name) == name, col(LockRecord.holder) == holder)
                .values(expires_at=time.time() + ttl)
            )
            return done.rowcount > 0

    def release(self, name: str, holder: str) -> None:
        with self._write() as conn:
            conn.execute(
                delete(LockRecord).where(col(LockRecord.name) == name, col(LockRecord.holder) == holder)
            )

    def lock(self, name: str) -> LockRecord | None:
        with self._engine.connect() as conn:
            row = conn.execute(select(LockRecord).where(col(LockRecord.name) == name)).first()
        return LockRecord.model_validate(row._mapping) if row else None

    # -- access ------------------------------------------------------------------------------

    def admitted(self, platform: str, user: str) -> bool:
        query = select(AdmittedRecord).where(
            col(AdmittedRecord.platform) == platform, col(AdmittedRecord.user) == user
        )
        with self._engine.connect() as conn:
            return conn.execute(query).first() is not None

    def pairing_for(self, platform: str, user: str) -> PairingRecord | None:
        """The user's unexpired code, if one was handed out."""
        query = select(PairingRecord).where(
            col(PairingRecord.platform) == platform,
            col(PairingRecord.user) == user,
            col(PairingRecord.expires_at) > time.time(),
        )
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        return PairingRecord.model_validate(row._mapping) if row else None

    def pending_codes(self) -> int:
        query = select(PairingRecord).where(col(PairingRecord.expires_at) > time.time())
        with self._engine.connect() as conn:
            return len(conn.execute(query).all())

    def add_pairing(self, record: PairingRecord) -> None:
        with self._write() as conn:
            conn.execute(delete(PairingRecord).where(col(PairingRecord.expires_at) <= time.time()))
            conn.execute(insert(PairingRecord).values(record.model_dump()))

    def redeem(self, code: str) -> PairingRecord | None:
        """Admit the user a valid code was given to (the code is used up); None for an unknown or
        expired code."""
        with self._write() as conn:
            row = conn.execute(select(PairingRecord).where(col(PairingRecord.code) == code)).first()
            if row is None:
                return None
            pairing = PairingRecord.model_validate(row._mapping)
            conn.execute(delete(PairingRecord).where(col(PairingRecord.code) == code))
            if pairing.expires_at <= time.time():
                return None
            conn.execute(
                delete(AdmittedRecord).where(
                    col(AdmittedRecord.platform) == pairing.platform, col(AdmittedRecord.user) == pairing.user
                )
            )
            conn.execute(
                insert(AdmittedRecord).values(
                    platform=pairing.platform, user=pairing.user, admitted_at=time.time()
                )
            )
            return pairing


def _dead_here(lock: LockRecord) -> bool:
    """The holder ran on this machine and its process is gone (killed): its lock is stale at once."""
    if lock.host != HOST:
        return False
    try:
        os.kill(lock.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
