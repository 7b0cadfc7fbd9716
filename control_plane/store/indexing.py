"""SQLite's search indexes, filled in bulk behind the inserts rather than by a trigger per message.

Two external-content FTS5 indexes over messages.content: words (unicode61) and substrings/CJK (trigram).
System prompts are not indexed. Indexing each message in its own small transaction made FTS5 write and merge
a segment per transaction, which cost two thirds of an insert; one INSERT ... SELECT over many messages
costs a fraction of that per message. So messages are indexed in id order up to a mark kept in store_meta:
`catch_up` indexes everything above it. The store calls it before every search (so a search sees every
message) and from add_messages once `BATCH` messages wait (so the backlog stays small).

Ids only grow (AUTOINCREMENT) and SQLite has one writer at a time, so every id at or below the mark was
committed and indexed, and every later message is above it. Deleting a message must remove it from the
indexes with exactly its indexed values, which only applies to messages at or below the mark.
"""

from __future__ import annotations

from sqlalchemy import Connection, text

INDEXED_THROUGH = "fts_indexed_through"
"""store_meta key: the id of the last message whose text is in the search indexes."""
BATCH = 5000
"""add_messages catches the indexes up once this many messages wait: bigger batches write fewer, larger
FTS5 segments (less merging; 2,000 gave 6,000 messages/s, 5,000 gave 7,400/s), but one insert in so many
takes the whole batch's time (about 0.2 s for 5,000)."""

# The trigram index holds no positions or sizes (detail=none, columnsize=0): it only narrows candidates, which
# LIKE then checks, and it costs a third less to write than a full one.
FTS_TABLES = {
    "messages_fts": "tokenize='unicode61 remove_diacritics 2'",
    "messages_trigram": "tokenize='trigram', detail=none, columnsize=0",
}
INDEXED = "role <> 'system' AND content IS NOT NULL"
_MARK = f"(SELECT CAST(value AS INTEGER) FROM store_meta WHERE key = '{INDEXED_THROUGH}')"
UNINDEX_TRIGGER = (
    "CREATE TRIGGER IF NOT EXISTS messages_unindex AFTER DELETE ON messages "
    f"WHEN old.role <> 'system' AND old.content IS NOT NULL AND old.id <= {_MARK} BEGIN "
    + " ".join(
        f"INSERT INTO {t}({t}, rowid, content) VALUES ('delete', old.id, old.content);" for t in FTS_TABLES
    )
    + " END"
)


def backlog(conn: Connection) -> int:
    """How many message ids lie above the mark (an upper bound on the messages waiting to be indexed)."""
    return int(conn.scalar(text(f"SELECT coalesce((SELECT max(id) FROM messages), 0) - {_MARK}")) or 0)


def catch_up(conn: Connection) -> None:
    """Index every message above the mark and move the mark. Call inside a write transaction."""
    last = int(conn.scalar(text("SELECT coalesce(max(id), 0) FROM messages")) or 0)
    mark = int(conn.scalar(text(f"SELECT {_MARK}")) or 0)
    if last <= mark:
        return
    for table in FTS_TABLES:
        conn.execute(
            text(
                f"INSERT INTO {table}(rowid, content) SELECT id, content FROM messages "
                f"WHERE id > :mark AND id <= :last AND {INDEXED} ORDER BY id"
            ),
            {"mark": mark, "last": last},
        )
    conn.execute(
        text("UPDATE store_meta SET value = :last WHERE key = :key"),
        {"last": str(last), "key": INDEXED_THROUGH},
    )


def migrate_v1(conn: Connection) -> None:
    """Schema 1 indexed every message by trigger: all are indexed, so the mark starts at the last one."""
    conn.execute(text("DROP TRIGGER IF EXISTS messages_index"))
    conn.execute(text("DROP TRIGGER IF EXISTS messages_unindex"))
    conn.execute(
        text(
            "INSERT INTO store_meta(key, value) SELECT :key, CAST(coalesce(max(id), 0) AS TEXT) FROM messages"
        ),
        {"key": INDEXED_THROUGH},
    )
