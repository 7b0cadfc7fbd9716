"""Snapshots: what one holds, and the registry that keeps them across control-plane restarts.

A snapshot holds the sandbox's workspace (a copy; where it lives depends on the backend: a directory
on this host for local, a Docker volume, a directory on the SSH host, a Modal image) plus each idle
named shell session's working directory and exported variables. Running processes are never kept: a
sandbox started from a snapshot starts with none, and a session that was running a command when the
snapshot was taken is not restored (`shells["skipped"]` says so).

The registry is one JSON file per snapshot in a directory (the profile's `snapshots/`), written
atomically, and only once the copy is complete: a snapshot either exists whole or not at all.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import SandboxError

log = logging.getLogger("hermetic.backends.snapshots")

SNAPSHOT_LABEL = "org.hermetic.snapshot"
_ID = re.compile(r"^snap-[0-9a-f]{12}$")
PARTIAL = ".partial"
HOLDS = (
    "the workspace",
    "each idle shell session's working directory and exported variables",
)
NOT_KEPT = "running processes (a sandbox started from a snapshot starts with none)"


class SnapshotError(SandboxError):
    """A snapshot could not be taken, found or used; says why."""


class NoSuchSnapshot(SnapshotError):
    """No snapshot has this id (or it is not an id at all)."""


def new_snapshot_id() -> str:
    return "snap-" + secrets.token_hex(6)


def check_id(snapshot_id: str) -> str:
    """The id, if it is one; NoSuchSnapshot otherwise (ids name files: nothing else may pass)."""
    if not isinstance(snapshot_id, str) or not _ID.match(snapshot_id):
        raise NoSuchSnapshot(f"{snapshot_id!r} is not a snapshot id (they look like snap-0123456789ab)")
    return snapshot_id


class Snapshot(BaseModel):
    """One saved sandbox state. `location` is the backend's own reference to the copy."""

    model_config = ConfigDict(extra="forbid")

    id: str
    backend: str
    """The backend family that made it (local, docker, ssh, modal): only it can start a sandbox from it."""
    created: float
    bytes: int
    """Disk the copy uses (for Modal: unknown, 0)."""
    label: str | None = None
    source: str
    """The sandbox it was taken from."""
    owner: str | None = None
    """Who it belongs to (a session id for checkpoints); retention counts per owner."""
    workdir: str
    """The workspace path in the source sandbox."""
    location: dict[str, str]
    shells: dict[str, Any] = {}
    """What `shell.state` returned: {workspace, sessions: {name: {cwd, env}}, skipped: {name: why}}."""
    meta: dict[str, str] = {}
    """The caller's own notes (a checkpoint's number, tool and workspace fingerprint)."""

    @property
    def holds(self) -> dict[str, Any]:
        """What the snapshot holds, for people: the workspace, the sessions, what is not kept."""
        return {
            "workspace": self.workdir,
            "shell_sessions": sorted(self.shells.get("sessions", {})),
            "sessions_not_kept": dict(self.shells.get("skipped", {})),
            "not_kept": NOT_KEPT,
        }

    def summary(self) -> dict[str, Any]:
        return {**self.model_dump(exclude={"shells"}), "holds": self.holds}


class SnapshotStore:
    """The registry: `<root>/<id>.json` per snapshot, and `<root>/data/` for copies kept on this host."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _record(self, snapshot_id: str) -> Path:
        return self.root / f"{check_id(snapshot_id)}.json"

    def data_dir(self, snapshot_id: str) -> Path:
        """Where a copy kept on this host lives (local backend)."""
        return self.root / "data" / check_id(snapshot_id)

    def put(self, snapshot: Snapshot) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self._record(snapshot.id)
        tmp = path.with_name(path.name + PARTIAL)
        tmp.write_text(snapshot.model_dump_json(indent=1))
        os.replace(tmp, path)

    def get(self, snapshot_id: str) -> Snapshot:
        """The snapshot; NoSuchSnapshot when unknown, SnapshotError when its record is damaged."""
        path = self._record(snapshot_id)
        try:
            raw = path.read_text()
        except FileNotFoundError:
            raise NoSuchSnapshot(f"no snapshot {snapshot_id} (see `hermetic snapshot list`)") from None
        try:
            return Snapshot.model_validate(json.loads(raw))
        except (ValueError, ValidationError) as exc:
            raise SnapshotError(
                f"snapshot {snapshot_id}'s record {path} is damaged ({str(exc).splitlines()[0]}); "
                "remove it with `hermetic snapshot rm`"
            ) from None

    def list(self, owner: str | None = None) -> builtins.list[Snapshot]:
        """Every readable snapshot (of `owner`), oldest first; damaged records are left out (`damaged`)."""
        found = []
        for path in sorted(self.root.glob("snap-*.json")):
            try:
                snapshot = self.get(path.stem)
            except SnapshotError:
                continue
            if owner is None or snapshot.owner == owner:
                found.append(snapshot)
        return sorted(found, key=lambda s: s.created)

    def damaged(self) -> builtins.list[str]:
        """Ids whose record cannot be read."""
        bad = []
        for path in sorted(self.root.glob("snap-*.json")):
            try:
                self.get(path.stem)
            except SnapshotError:
                bad.append(path.stem)
        return bad

    def relabel(self, snapshot_id: str, label: str | None) -> Snapshot:
        snapshot = self.get(snapshot_id).model_copy(update={"label": label})
        self.put(snapshot)
        return snapshot

    def forget(self, snapshot_id: str) -> None:
        """Remove the record (the backend removes the copy first)."""
        self._record(snapshot_id).unlink(missing_ok=True)

    def expired(
        self, keep: int | None, max_age: float | None, now: float | None = None
    ) -> builtins.list[Snapshot]:
        """Snapshots retention removes: past `max_age` seconds, or beyond the newest `keep` of their owner."""
        now = time.time() if now is None else now
        doomed: dict[str, Snapshot] = {}
        by_owner: dict[str | None, builtins.list[Snapshot]] = {}
        for snapshot in self.list():
            if max_age is not None and now - snapshot.created > max_age:
                doomed[snapshot.id] = snapshot
            else:
                by_owner.setdefault(snapshot.owner, []).append(snapshot)
        if keep is not None:
            for owned in by_owner.values():
                for snapshot in owned[: max(len(owned) - keep, 0)]:
                    doomed[snapshot.id] = snapshot
        return sorted(doomed.values(), key=lambda s: s.created)

    def leftovers(self, older_than: float = 3600.0) -> builtins.list[Path]:
        """Copies on this host without a record (a control plane that died mid-copy), older than an hour."""
        data = self.root / "data"
        if not data.is_dir():
            return []
        cutoff = time.time() - older_than
        return [
            path
            for path in data.iterdir()
            if not (self.root / f"{path.name.removesuffix(PARTIAL)}.json").exists()
            and _modified(path, default=cutoff) < cutoff
        ]

    def disk_use(self) -> int:
        return sum(s.bytes for s in self.list())


def _modified(path: Path, default: float) -> float:
    """The path's mtime; `default` when it is gone (a copy in flight renamed or removed it meanwhile)."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return default
