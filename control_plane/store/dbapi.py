"""The SQLite driver: a sqlite3 module that may load extensions, and sqlite-vec loaded into each connection.

Debian's Python builds its sqlite3 module without extension loading, so the store uses pysqlite3 (the same
module, with its own recent SQLite) where it is installed and the standard module where that can load
extensions. The vec0 tables (vectors.py) need sqlite-vec in every connection, also one that only deletes.
"""

from __future__ import annotations

import sqlite3
from types import ModuleType
from typing import Any

import sqlite_vec

from .errors import StoreError


def sqlite_module() -> ModuleType:
    """The DB-API module for SQLite connections: one whose connections can load sqlite-vec."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3.dbapi2
    try:
        import pysqlite3.dbapi2 as module  # type: ignore[import-not-found]
    except ImportError:
        raise StoreError(
            "this Python's sqlite3 cannot load extensions (sqlite-vec): pip install pysqlite3-binary"
        ) from None
    return module


def load_vec(dbapi_connection: Any) -> None:
    dbapi_connection.enable_load_extension(True)
    try:
        sqlite_vec.load(dbapi_connection)
    finally:
        dbapi_connection.enable_load_extension(False)
