"""The messages around search hits and their sessions' first and last exchanges, in one query.

A recall shows several sessions, each with a window around its hit and its edges: one UNION ALL of small
indexed lookups (messages_session: session_id, id) costs far less than an ORM query per part.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import JSON, Connection, text

from .records import MessageRecord

EXCHANGE = "role IN ('user', 'assistant') AND content IS NOT NULL"
"""A session's first and last exchanges: what was asked and answered, without tool traffic."""


@dataclass
class Spot:
    """Where to look: a session, and optionally a message in it with how many neighbours either side."""

    session_id: str
    message_id: int | None = None
    before: int = 0
    after: int = 0


@dataclass
class Surroundings:
    window: list[MessageRecord] = field(default_factory=list)
    """The message and its neighbours (system prompts left out), in order."""
    first: list[MessageRecord] = field(default_factory=list)
    last: list[MessageRecord] = field(default_factory=list)
    """The session's last exchange messages, none of them also in `first`."""


def surroundings(conn: Connection, spots: list[Spot], edges: int) -> list[Surroundings]:
    """For each spot, its window and its session's first and last `edges` exchange messages."""
    parts: list[str] = []
    params: dict[str, object] = {"edges": max(edges, 0)}
    for i, spot in enumerate(spots):
        params[f"s{i}"] = spot.session_id
        mine = f"SELECT * FROM messages WHERE session_id = :s{i}"
        lookups: list[tuple[str, str]] = []
        if spot.message_id is not None:
            params.update(
                {f"m{i}": spot.message_id, f"b{i}": max(spot.before, 0), f"a{i}": max(spot.after, 0) + 1}
            )
            lookups += [
                ("window", f"{mine} AND role <> 'system' AND id < :m{i} ORDER BY id DESC LIMIT :b{i}"),
                ("window", f"{mine} AND role <> 'system' AND id >= :m{i} ORDER BY id LIMIT :a{i}"),
            ]
        if edges > 0:
            lookups += [
                ("first", f"{mine} AND {EXCHANGE} ORDER BY id LIMIT :edges"),
                ("last", f"{mine} AND {EXCHANGE} ORDER BY id DESC LIMIT :edges"),
            ]
        # Each lookup keeps its own ORDER BY and LIMIT inside a subquery, which both dialects allow.
        parts += [f"SELECT {i} AS spot, '{tag}' AS part, p.* FROM ({sql}) AS p" for tag, sql in lookups]
    found = [Surroundings() for _ in spots]
    union = " UNION ALL ".join(p for p in parts if p)
    if not union:
        return found
    rows = conn.execute(text(union).columns(tool_calls=JSON(none_as_null=True)), params).mappings()
    for row in rows:
        values = dict(row)
        spot, part = values.pop("spot"), values.pop("part")
        # Whole rows of the table itself, typed by the driver: built without validation (a tenth of the
        # time, 6 us instead of 59, on the dozen messages of every recall).
        getattr(found[spot], part).append(MessageRecord.model_construct(**values))
    for each in found:
        for messages in (each.window, each.first, each.last):
            messages.sort(key=lambda m: m.id or 0)
        shown = {m.id for m in each.first}
        each.last = [m for m in each.last if m.id not in shown]
    return found
