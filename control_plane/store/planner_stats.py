"""PostgreSQL's planner statistics kept up with the messages a process inserts.

A table never analyzed, or analyzed when it was a fraction of its size, gets plans made for a handful of
rows: right after 100,000 messages went in, a substring search joined each of its 14,768 candidates against
every session in turn (a nested loop over what the planner took for four sessions: 1.9 s instead of
10 ms). Autovacuum analyzes at the earliest a minute later (autovacuum_naptime), so the store runs ANALYZE
itself once it has inserted as many messages as the statistics counted: a handful of runs while a table
grows from empty to any size, none while it stays about the same.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

log = logging.getLogger(__name__)

CHECK_EVERY = 1000
"""Messages a process inserts between two looks at the statistics (one catalog row)."""


class PlannerStats:
    """Counts the messages this process inserted; every CHECK_EVERY, analyzes messages and sessions when
    that count since its last ANALYZE reaches the rows the statistics hold (pg_class.reltuples)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._unchecked = 0
        self._since_analyze = 0

    def inserted(self, count: int) -> None:
        with self._lock:
            self._unchecked += count
            self._since_analyze += count
            if self._unchecked < CHECK_EVERY:
                return
            self._unchecked = 0
            since = self._since_analyze
        try:
            with self._engine.connect() as conn:
                counted = conn.scalar(text("SELECT reltuples FROM pg_class WHERE oid = 'messages'::regclass"))
                if since < max(float(counted or 0), CHECK_EVERY):  # -1: never analyzed
                    return
                # A table owned by another role is skipped with a warning, not an error.
                conn.execute(text("ANALYZE messages, sessions"))
                conn.commit()
        except SQLAlchemyError as exc:  # the messages are stored: statistics are the planner's, not theirs
            log.warning("planner statistics not refreshed: %s", str(exc).splitlines()[0])
            return
        with self._lock:
            self._since_analyze -= since
