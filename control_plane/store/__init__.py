"""The sessions database: `Store(url)` over SQLite (WAL, FTS5) or PostgreSQL (full-text search)."""

from .errors import StoreError
from .records import MessageRecord, SearchHit, SessionRecord, ToolCallRecord
from .store import Store

__all__ = ["MessageRecord", "SearchHit", "SessionRecord", "Store", "StoreError", "ToolCallRecord"]
