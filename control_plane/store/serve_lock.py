"""One `hermetic serve` per SQLite database: an OS lock on a file beside it, held for the process's life.

A server's live sessions, event streams and sandbox handles are its own, so a second server on the same
SQLite profile would run the same sessions twice. flock(2) is released by the kernel when the process
ends however it ends (kill -9 included), so no stale lock survives its holder; the file only names the
holder for the refusal's message. PostgreSQL takes no lock here (replicas coordinate in the database).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError


class DatabaseInUse(Exception):
    """Another `hermetic serve` holds this SQLite database; the message names it and what to do."""


def lock_path(database_url: str) -> Path | None:
    """The lock file beside a SQLite database file; None for PostgreSQL or a URL the store will refuse."""
    try:
        url = make_url(database_url)
    except ArgumentError:
        return None
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    path = Path(url.database).expanduser()
    return path.with_name(f"{path.name}.serve.lock")


@contextlib.contextmanager
def serving(database_url: str, listening: str) -> Iterator[None]:
    """Hold the database's serve lock while the block runs, recording this process (pid, host and
    `listening`, its address) in it; raise DatabaseInUse when another process holds it."""
    path = lock_path(database_url)
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited: sandboxes never hold it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DatabaseInUse(_refusal(path, os.pread(fd, 4096, 0))) from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "listening": listening}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock; the file stays (removing it would race the next holder)


def _refusal(path: Path, recorded: bytes) -> str:
    database = path.with_name(path.name.removesuffix(".serve.lock"))
    try:
        holder = json.loads(recorded)
        who = f"pid {holder['pid']} on {holder['host']}, listening on {holder['listening']}"
    except (ValueError, KeyError, TypeError):
        who = "a process that is still starting"  # it holds the lock but has not written itself yet
    return (
        f"another `hermetic serve` already serves {database} ({who}): SQLite is for one server "
        "process, and a second would run the same sessions twice. Stop that one first, or give "
        "this one its own home (HERMETIC_ROOT)."
    )
