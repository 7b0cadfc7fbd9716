"""The /v1 and A2A conversation keys of older releases, kept in files of the profile home
(openai-conversations.sqlite3, before it openai-conversations.json): bound again in the store's bindings
(store/bindings.py) once, then the files are removed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from ..store.bindings import Bindings

A2A_PREFIX = "a2a:"
"""How the old file told an A2A context's key from a /v1 conversation's."""


def take_over(home: Path, bindings: Bindings) -> None:
    rows: list[tuple[str, str]] = []  # oldest first
    old_json = home / "openai-conversations.json"
    try:
        data = json.loads(old_json.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        data = {}
    if isinstance(data, dict):
        rows += [(k, v) for k, v in data.items() if isinstance(v, str)]
    old_db = home / "openai-conversations.sqlite3"
    if old_db.exists():
        db = sqlite3.connect(old_db)
        try:
            rows += db.execute("SELECT key, session FROM conversations ORDER BY rowid").fetchall()
        except sqlite3.DatabaseError:
            pass  # not a keys file: nothing to keep from it
        finally:
            db.close()
    if not rows:
        return
    # Their order is all the old files knew of their age: a second apart keeps it for the least recently
    # used to be forgotten first.
    stamped = [(key, session, float(i), float(i)) for i, (key, session) in enumerate(rows)]
    a2a = [(k.removeprefix(A2A_PREFIX), s, t, u) for k, s, t, u in stamped if k.startswith(A2A_PREFIX)]
    bindings.take_over("a2a", a2a)
    bindings.take_over("openai", [row for row in stamped if not row[0].startswith(A2A_PREFIX)])
    for suffix in ("", "-wal", "-shm"):
        old_db.with_name(old_db.name + suffix).unlink(missing_ok=True)
    old_json.unlink(missing_ok=True)
