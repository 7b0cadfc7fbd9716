"""Which session a chat front end's conversation is: its derived key (api/openai/conversations.py) ->
session id, in PROFILE_HOME/openai-conversations.sqlite3, so a conversation survives a server restart.

SQLite on one connection held by the profile: a lookup and an insert take microseconds with ten keys or
ten thousand. The JSON file this replaces was read whole on every request and rewritten on every new
chat, on the streaming path (25 ms at 10,000 keys); its keys are taken over once."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

KEPT_KEYS = 10_000
"""Conversation keys remembered per profile (the least recently started are forgotten first)."""


class ConversationKeys:
    def __init__(self, home: Path) -> None:
        self._db = sqlite3.connect(home / "openai-conversations.sqlite3", check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: a crash loses no committed key, no fsync each
        with self._db:
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS conversations (key TEXT PRIMARY KEY, session TEXT NOT NULL)"
            )
        self._take_over(home / "openai-conversations.json")

    def _take_over(self, old: Path) -> None:
        try:
            data = json.loads(old.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return
        rows = [(k, v) for k, v in data.items() if isinstance(v, str)] if isinstance(data, dict) else []
        with self._db:  # oldest first, as the file kept them
            self._db.executemany("INSERT OR IGNORE INTO conversations VALUES (?, ?)", rows)
        old.unlink(missing_ok=True)

    def get(self, key: str) -> str | None:
        row = self._db.execute("SELECT session FROM conversations WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def put(self, key: str, session_id: str) -> None:
        with self._db:  # a key put again gets a new rowid: the lowest rowids are the first forgotten
            self._db.execute("DELETE FROM conversations WHERE key = ?", (key,))
            added = self._db.execute("INSERT INTO conversations VALUES (?, ?)", (key, session_id)).lastrowid
            self._db.execute("DELETE FROM conversations WHERE rowid <= ?", ((added or 0) - KEPT_KEYS,))

    def close(self) -> None:
        self._db.close()
