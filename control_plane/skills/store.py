"""The skills metadata database (skills.db in the skills dir): versions, verdicts, usage, curation state,
and the FTS5 index that ranks skills for the system prompt. Plain sqlite3: FTS5 tables need raw SQL."""

from __future__ import annotations

import fcntl
import json
import sqlite3
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .model import Verdict

SCHEMA = """
CREATE TABLE IF NOT EXISTS skills (
    name TEXT PRIMARY KEY,
    description TEXT NOT NULL,
    version INTEGER NOT NULL,              -- the version in library/NAME
    status TEXT NOT NULL,                  -- pass | unverified | fail (failed re-verification)
    state TEXT NOT NULL DEFAULT 'active',  -- active | stale | failing | archived
    pinned INTEGER NOT NULL DEFAULT 0,
    uses INTEGER NOT NULL DEFAULT 0,
    successes INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    created REAL NOT NULL,
    last_used REAL NOT NULL                -- creation counts as use, so a new skill is not stale
);
CREATE TABLE IF NOT EXISTS versions (
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    created REAL NOT NULL,
    verdict_id INTEGER,
    note TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (name, version)
);
CREATE TABLE IF NOT EXISTS verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    skill TEXT NOT NULL,
    status TEXT NOT NULL,
    reasons TEXT NOT NULL,      -- JSON list
    checks TEXT NOT NULL,       -- JSON list of {name, ok, output}
    duration_ms REAL NOT NULL,
    image TEXT,
    network TEXT NOT NULL,
    proposer TEXT NOT NULL,     -- "agent", "cli", "api", "reverify"
    session_id TEXT,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS loads (       -- which session loaded which skill (for outcome counts)
    session_id TEXT NOT NULL,
    name TEXT NOT NULL,
    PRIMARY KEY (session_id, name)
);
CREATE VIRTUAL TABLE IF NOT EXISTS skills_fts USING fts5(name, description, body);
CREATE TABLE IF NOT EXISTS merges (      -- skills merged into one, for unmerge
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    into_name TEXT NOT NULL,
    into_version INTEGER NOT NULL,         -- the merged version
    previous_version INTEGER,              -- into_name's version before the merge; NULL: a new skill
    sources TEXT NOT NULL,                 -- JSON list of the skills merged (archived, merged_into set)
    created REAL NOT NULL,
    undone REAL                            -- when the merge was rolled back
);
"""
COLUMNS = {  # added to skills.db files made before them (CREATE TABLE IF NOT EXISTS keeps old tables)
    "streak": "INTEGER NOT NULL DEFAULT 0",  # failed runs in a row; retire_after of them: state failing
    "merged_into": "TEXT",  # set on a skill archived by a merge
    "reviewed_runs": "INTEGER NOT NULL DEFAULT 0",  # runs counted when it was last reviewed for its rate
}


class SkillStore:
    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        # processes opening it at once (replicas starting together on one profile home) take turns:
        # SQLite answers a concurrent switch to WAL, or the schema's first creation, "database is locked"
        # at once, without waiting on its busy timeout
        with self._lock, open(path.with_name(path.name + ".init-lock"), "a") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            # WAL with synchronous=NORMAL, like the sessions store: a commit is not an fsync, so
            # installing a hundred skills is not hundreds of disk flushes (a power cut may lose the last
            # commits, never corrupt the database)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            have = {row["name"] for row in self._db.execute("PRAGMA table_info(skills)")}
            for column, declaration in COLUMNS.items():
                if column not in have:
                    self._db.execute(f"ALTER TABLE skills ADD COLUMN {column} {declaration}")

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def transaction(self, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
        with self._lock:
            self._db.execute("BEGIN")
            try:
                for sql, params in statements:
                    self._db.execute(sql, params)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def add_verdict(self, verdict: Verdict, proposer: str, session_id: str | None) -> int:
        with self._lock:
            cursor = self._db.execute(
                "INSERT INTO verdicts (skill, status, reasons, checks, duration_ms, image, network, proposer,"
                " session_id, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    verdict.skill,
                    verdict.status,
                    json.dumps(verdict.reasons),
                    json.dumps([asdict(check) for check in verdict.checks]),
                    verdict.duration_ms,
                    verdict.image,
                    verdict.network,
                    proposer,
                    session_id,
                    time.time(),
                ),
            )
            return int(cursor.lastrowid or 0)

    def verdicts(self, name: str) -> list[dict[str, Any]]:
        rows = self.execute("SELECT * FROM verdicts WHERE skill = ? ORDER BY id", (name,))
        return [
            {**dict(row), "reasons": json.loads(row["reasons"]), "checks": json.loads(row["checks"])}
            for row in rows
        ]

    def close(self) -> None:
        with self._lock:
            self._db.close()
