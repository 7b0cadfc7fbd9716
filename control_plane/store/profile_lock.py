"""A profile's write locks across processes, one per kind of write (`memory`, `skills`): a memory file's
read-modify-write, a skill merge and its lock file, taken by one process at a time.

On PostgreSQL it is a transaction-level advisory lock (`pg_advisory_xact_lock`) keyed by the profile and
the kind: replicas share the database, not necessarily a machine, and a file lock on a volume several
machines mount (NFS and the like) may not hold across them. On SQLite (one machine) it is an `flock` on
`.KIND.lock` in the profile home. Either way the lock goes with its holder, however the holder ends.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL, make_url


def advisory_key(profile: str, what: str) -> int:
    """The signed 64-bit key of `what` in `profile` (the same on every replica)."""
    digest = hashlib.sha256(f"hermetic:{profile}:{what}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class ProfileLock:
    """Exclusive locks of one profile, by kind. Reentrant within a thread (a merge that archives)."""

    def __init__(self, home: Path, profile: str, database: Engine | str | None = None) -> None:
        """`database`: the profile's (an open engine, or its URL, connected on the first lock)."""
        self.home, self.profile = home, profile
        self._database = database if _postgres(database) else None
        """The PostgreSQL database the advisory locks are taken in; None: file locks."""
        self._held = threading.local()
        self._opening = threading.Lock()

    @property
    def engine(self) -> Engine | None:
        with self._opening:
            if isinstance(self._database, str):
                self._database = create_engine(_with_driver(self._database), pool_pre_ping=True)
            return self._database

    @contextmanager
    def hold(self, what: str) -> Iterator[None]:
        """Hold `what` for the block; raises OSError when the lock file cannot be opened."""
        held: set[str] = self._held.__dict__.setdefault("kinds", set())
        if what in held:
            yield
            return
        taking = self._advisory(what) if self._database is not None else self._flock(what)
        with taking:
            held.add(what)
            try:
                yield
            finally:
                held.discard(what)

    @contextmanager
    def _advisory(self, what: str) -> Iterator[None]:
        engine = self.engine
        assert engine is not None
        with engine.begin() as conn:  # the lock ends with this transaction
            conn.execute(
                text("SELECT pg_advisory_xact_lock(:key)"), {"key": advisory_key(self.profile, what)}
            )
            yield

    @contextmanager
    def _flock(self, what: str) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.home / f".{what}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _postgres(database: Engine | str | None) -> bool:
    if isinstance(database, Engine):
        return database.dialect.name == "postgresql"
    return database is not None and make_url(database).get_backend_name() == "postgresql"


def _with_driver(url: str) -> URL:
    parsed = make_url(url)  # the driver this package depends on, as store/engine.py opens it
    return parsed.set(drivername="postgresql+psycopg") if parsed.drivername == "postgresql" else parsed
