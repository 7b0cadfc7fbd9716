"""Sessions read back from the store as trajectories: each session's messages in chat format, in order,
with whether each of its tool calls succeeded. Read in chunks of sessions, one query per chunk."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select as sa_select
from sqlmodel import Session, col, select

from ..store import EvalAttemptRecord, MessageRecord, SessionRecord, Store, ToolCallRecord

CHUNK = 500
"""Sessions whose messages one query fetches."""
_AGO = re.compile(r"^(\d+)\s*([mhdw])$")
_UNIT = {"m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass
class Trajectory:
    session: SessionRecord
    messages: list[dict[str, Any]]
    """The conversation in OpenAI chat format (system prompt first); an assistant message the model
    reasoned for has its reasoning as `reasoning_content`, the field reasoning providers answer with."""
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
    min_reward: float | None = None
    """Only evaluation attempts (source eval) whose verifier gave at least this reward."""


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
    if selection.min_reward is not None:
        labelled = sa_select(col(EvalAttemptRecord.session_id)).where(
            col(EvalAttemptRecord.reward) >= selection.min_reward
        )
        query = query.where(col(SessionRecord.id).in_(labelled))
    with Session(store.engine, expire_on_commit=False) as db:
        sessions = list(db.exec(query.order_by(col(SessionRecord.created_at), col(SessionRecord.id))))
    m = MessageRecord
    fields = (m.session_id, m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.reasoning)
    columns = [col(c) for c in fields]
    for start in range(0, len(sessions), chunk):
        part = sessions[start : start + chunk]
        ids = [s.id for s in part]
        by_session: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
        failed: Counter[str] = Counter()
        counted: Counter[str] = Counter()
        # Core rows, not ORM objects: building a model per message cost most of an export.
        with store.engine.connect() as conn:
            rows = conn.execute(
                sa_select(*columns).where(col(m.session_id).in_(ids)).order_by(col(m.session_id), col(m.id))
            )
            for session_id, role, content, tool_calls, tool_call_id, name, reasoning in rows:
                message: dict[str, Any] = {"role": role, "content": content}
                if reasoning:
                    message["reasoning_content"] = reasoning
                if tool_calls is not None:
                    message["tool_calls"] = tool_calls
                if tool_call_id is not None:
                    message["tool_call_id"] = tool_call_id
                if name is not None:
                    message["name"] = name
                by_session[session_id].append(message)
            calls = conn.execute(
                sa_select(col(ToolCallRecord.session_id), col(ToolCallRecord.ok)).where(
                    col(ToolCallRecord.session_id).in_(ids)
                )
            )
            for session_id, ok in calls:
                counted[session_id] += 1
                failed[session_id] += not ok
            e = EvalAttemptRecord
            label_fields = ("run", "task", "attempt", "reward", "passed")
            found = conn.execute(
                sa_select(col(e.session_id), *(col(getattr(e, f)) for f in label_fields)).where(
                    col(e.session_id).in_(ids)
                )
            )
            labels = {row[0]: dict(zip(label_fields, row[1:], strict=True)) for row in found}
        for record in part:
            extra = {"eval": labels[record.id]} if record.id in labels else {}
            yield Trajectory(record, by_session[record.id], failed[record.id], counted[record.id], extra)
