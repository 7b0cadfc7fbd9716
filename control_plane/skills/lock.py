"""The lock file (`skills/lock.json` in the profile home): where each installed skill came from.

One entry per installed skill: its source, ref and commit, the skill's directory inside the source,
the content hash of what was merged, install time, verdict, accepted threat findings and the warnings
the lenient reader gave. Written whole to a temporary file and renamed, so a crash never leaves half.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

LOCK_FILE = "lock.json"


@dataclass
class LockEntry:
    name: str
    source: str
    """The source as given (`LOCATION[#REF][:SUBDIR]`), fetched again by update."""
    path: str
    """The skill's directory inside the fetched source ('.' for the root)."""
    content_hash: str
    """sha256 of the skill as merged (normalised), see content_hash()."""
    installed: float
    verdict: Literal["pass", "fail", "unverified"]
    version: int
    """The library version this entry installed."""
    commit: str | None = None
    tap: str | None = None
    accepted: list[str] = field(default_factory=list)
    accept: list[str] = field(default_factory=list)
    """The ids of the accepted findings: re-verification accepts them while the skill is as installed."""
    allow_unverified: bool = False
    """The operator allowed the install to merge without checks."""
    warnings: list[str] = field(default_factory=list)
    origin: dict[str, Any] | None = None
    """The exporting Hermetic's manifest (its verdict and image), when installed from an export."""
    updated: float | None = None

    @property
    def provenance(self) -> str:
        """One line for listings: where from, and what the operator accepted."""
        where = f"{self.tap}/{self.name}" if self.tap else self.source
        commit = f"@{self.commit[:12]}" if self.commit else ""
        accepted = f"; accepted findings: {len(self.accepted)}" if self.accepted else ""
        return f"installed from {where}{commit}{accepted}"


class Lock:
    def __init__(self, root: Path) -> None:
        self.path = root / LOCK_FILE
        self._lock = threading.Lock()

    def entries(self) -> dict[str, LockEntry]:
        if not self.path.exists():
            return {}
        data = json.loads(self.path.read_text(encoding="utf-8"))
        return {name: LockEntry(**entry) for name, entry in data.get("skills", {}).items()}

    def get(self, name: str) -> LockEntry | None:
        return self.entries().get(name)

    def put(self, *new: LockEntry) -> None:
        """Add or replace entries (one write for all of them)."""
        with self._lock:
            entries = self.entries()
            entries.update({entry.name: entry for entry in new})
            self._write(entries)

    def remove(self, name: str) -> None:
        with self._lock:
            entries = self.entries()
            entries.pop(name, None)
            self._write(entries)

    def _write(self, entries: dict[str, LockEntry]) -> None:
        data = {"version": 1, "skills": {name: asdict(entries[name]) for name in sorted(entries)}}
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, self.path)


def content_hash(directory: Path) -> str:
    """sha256 over every file's relative path and bytes (links by their target), in path order; file
    modes and times do not count, so a copy, an archive and a checkout of the same skill hash alike."""
    digest = hashlib.sha256()
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).as_posix()
        if path.is_symlink():
            digest.update(f"L {rel}\0{os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"F {rel}\0".encode())
            digest.update(path.read_bytes())
            digest.update(b"\0")
    return f"sha256:{digest.hexdigest()}"
