"""Which replica holds each MCP session over streamable HTTP (an `Mcp-Session-Id`): the SDK keeps a
session's transport in the memory of the process that opened it, so every request of that session must
reach that replica. A session lives as long as its replica does: its row names the owner, and the owner's
row in `replicas` (renewed with its leases, store/leases.py) says whether it is alive. Nobody takes a
session over: a dead owner's session is gone, and its client initializes a new one (a 404, as the MCP
specification says).
"""

from __future__ import annotations

from sqlalchemy import Engine, text
from sqlmodel import Field, SQLModel

from .engine import create_tables
from .leases import NOW, Holder


class McpSessionRecord(SQLModel, table=True):
    __tablename__ = "mcp_sessions"

    id: str = Field(primary_key=True)
    """The Mcp-Session-Id the SDK handed the client."""
    owner: str = Field(index=True)
    """The replica that opened it (replicas.id)."""
    profile: str
    """The profile whose token opened it: only that profile's requests end it."""


_ALIVE = f"SELECT id FROM replicas WHERE expires_at >= {NOW}"


class McpOwners:
    """The MCP sessions' rows of one database, for the replica `me`."""

    def __init__(self, engine: Engine, me: str) -> None:
        self.engine, self.me = engine, me
        create_tables(engine, [SQLModel.metadata.tables["mcp_sessions"]])
        with engine.begin() as conn:  # the sessions of replicas that died (they lapsed with them)
            conn.execute(text(f"DELETE FROM mcp_sessions WHERE owner NOT IN ({_ALIVE})"))

    def opened(self, session_id: str, profile: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO mcp_sessions (id, owner, profile) VALUES (:id, :me, :profile) "
                    "ON CONFLICT (id) DO NOTHING"
                ),
                {"id": session_id, "me": self.me, "profile": profile},
            )

    def owner(self, session_id: str) -> Holder | None:
        """The live replica holding the session (where it listens); None when it is unknown or its
        replica died (its row goes then)."""
        with self.engine.begin() as conn:
            row = conn.execute(
                text(
                    f"SELECT m.owner, r.address, r.expires_at - {NOW} FROM mcp_sessions m "
                    f"JOIN replicas r ON r.id = m.owner AND r.expires_at >= {NOW} WHERE m.id = :id"
                ),
                {"id": session_id},
            ).first()
            if row is None:
                conn.execute(text("DELETE FROM mcp_sessions WHERE id = :id"), {"id": session_id})
                return None
        return Holder(owner=row[0], address=row[1], left=max(0.0, float(row[2])), running=False)

    def closed(self, session_id: str, profile: str) -> None:
        """The session ended here (a DELETE, or its profile's server no longer has it)."""
        with self.engine.begin() as conn:
            conn.execute(
                text("DELETE FROM mcp_sessions WHERE id = :id AND owner = :me AND profile = :profile"),
                {"id": session_id, "me": self.me, "profile": profile},
            )

    def leave(self) -> None:
        with self.engine.begin() as conn:
            conn.execute(text("DELETE FROM mcp_sessions WHERE owner = :me"), {"me": self.me})
