"""The sessions database: `Store(url)` over SQLite (WAL, FTS5) or PostgreSQL (full-text search)."""

from .errors import StoreError
from .records import EvalAttemptRecord, MessageRecord, SearchHit, SessionRecall, SessionRecord, ToolCallRecord
from .store import Store

__all__ = [
    "EvalAttemptRecord",
    "MessageRecord",
    "SearchHit",
    "SessionRecall",
    "SessionRecord",
    "Store",
    "StoreError",
    "ToolCallRecord",
]
