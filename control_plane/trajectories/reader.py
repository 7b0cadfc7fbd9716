"""Sessions read back from the store as trajectories: each session's messages in chat format, in order,
with whether each of its tool calls succeeded. Read in chunks of sessions, one query per chunk."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session, col, select

from ..store import MessageRecord, SessionRecord, Store, ToolCallRecord

CHUNK = 500
"""Sessions whose messages one query fetches."""
_AGO = re.compile(r"^(\d+)\s*([mhdw])$")
_UNIT = {"m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass
class Trajectory:
    session: SessionRecord
    messages: list[dict[str, Any]]
    """The conversation in OpenAI chat format (system prompt first)."""
    failed_calls: int = 0
    """Tool calls the audit rows record as failed."""
    tool_calls: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Selection:
    """Which sessions: these ids, else every session of the profile, narrowed by time and source."""

    ids: Sequence[str] = ()
    since: float | None = None
    sources: Sequence[str] = ()


def parse_since(text: str, now: float | None = None) -> float:
    """'7d', '12h', '30m', '2w' ago, or an ISO date or time (UTC unless it says otherwise)."""
    match = _AGO.match(text.strip())
    if match:
        return (time.time() if now is None else now) - int(match.group(1)) * _UNIT[match.group(2)]
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"--since {text!r}: a time ago (7d, 12h, 30m) or an ISO date (2026-11-30)") from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def read(store: Store, profile: str, selection: Selection, chunk: int = CHUNK) -> Iterator[Trajectory]:
    """The selected sessions of `profile`, oldest first."""
    query = select(SessionRecord).where(SessionRecord.profile == profile)
    if selection.ids:
        query = query.where(col(SessionRecord.id).in_(list(selection.ids)))
    if selection.since is not None:
        query = query.where(col(SessionRecord.created_at) >= selection.since)
    if selection.sources:
        query = query.where(col(SessionRecord.source).in_(list(selection.sources)))
    with Session(store.engine, expire_on_commit=False) as db:
        sessions = list(db.exec(query.order_by(col(SessionRecord.created_at), col(SessionRecord.id))))
    for start in range(0, len(sessions), chunk):
        part = sessions[start : start + chunk]
        ids = [s.id for s in part]
        with Session(store.engine, expire_on_commit=False) as db:
            messages = db.exec(
                select(MessageRecord)
                .where(col(MessageRecord.session_id).in_(ids))
                .order_by(col(MessageRecord.session_id), col(MessageRecord.id))
            )
            by_session: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
            for message in messages:
                by_session[message.session_id].append(message.to_chat())
            calls = db.exec(
                select(ToolCallRecord.session_id, ToolCallRecord.ok).where(
                    col(ToolCallRecord.session_id).in_(ids)
                )
            )
            failed: dict[str, int] = {}
            counted: dict[str, int] = {}
            for session_id, ok in calls:
                counted[session_id] = counted.get(session_id, 0) + 1
                if not ok:
                    failed[session_id] = failed.get(session_id, 0) + 1
        for record in part:
            yield Trajectory(
                record, by_session[record.id], failed.get(record.id, 0), counted.get(record.id, 0)
            )
