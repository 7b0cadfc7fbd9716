"""The files a task wrote, as A2A artifacts: the workspace's listing (names, sizes, mtimes, one runtime
call) before the task and after it; each file new or changed since is sent as an artifact `file:PATH`
holding its bytes (a FilePart: `raw`, `filename`, `media_type`), within MAX_FILE and MAX_TOTAL; one
over them is named in the `files` artifact, to fetch with GET /sessions/{id}/files/download."""

from __future__ import annotations

import mimetypes
import tempfile
from dataclasses import dataclass
from pathlib import Path

from a2a.types import Part

from backends import Sandbox, SandboxError

MAX_FILE = 1024 * 1024
"""The largest file sent in an artifact."""
MAX_TOTAL = 4 * 1024 * 1024
"""Bytes all of a task's file artifacts may hold."""
MAX_LISTED = 2000
"""Workspace entries compared (hidden ones and .git, node_modules, ... left out)."""
Listing = dict[str, tuple[float, int]]
"""A workspace's files: path -> (mtime, size)."""


@dataclass(frozen=True)
class Written:
    path: str
    size: int
    data: bytes | None
    """None: over the bounds, not sent."""

    def part(self) -> Part:
        media = mimetypes.guess_type(self.path)[0] or "application/octet-stream"
        return Part(raw=self.data or b"", filename=self.path, media_type=media)


def listing(sandbox: Sandbox | None) -> Listing:
    """The workspace's files now ({} without a sandbox: whatever it holds later is the task's)."""
    if sandbox is None:
        return {}
    try:
        listed = sandbox.runtime.fs_list(path=".", depth=64, limit=MAX_LISTED, call_timeout=60)
    except SandboxError:  # it went away: nothing to compare, nothing to send
        return {}
    return {e["name"]: (e["mtime"], e["size"]) for e in listed["entries"] if e["type"] == "file"}


def written(sandbox: Sandbox, before: Listing) -> list[Written]:
    """The files new or changed since `before`, with their bytes while the bounds allow (a session
    without a sandbox wrote none: its caller skips the call)."""
    after = listing(sandbox)
    changed = sorted(path for path, state in after.items() if before.get(path) != state)
    found: list[Written] = []
    total = 0
    with tempfile.TemporaryDirectory(prefix="hermetic-a2a-") as spool:
        for path in changed:
            size = after[path][1]
            if size > MAX_FILE or total + size > MAX_TOTAL:
                found.append(Written(path, size, None))
                continue
            try:
                data = sandbox.download(path, Path(spool) / str(len(found))).read_bytes()
            except (SandboxError, OSError):  # gone since the listing
                continue
            total += len(data)
            found.append(Written(path, len(data), data))
    return found
