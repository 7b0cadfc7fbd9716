"""File operations done natively, not through a shell, each path checked against the allowed roots."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import stat as stat_mod
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any, Callable, cast

# difflib, fnmatch and tarfile are imported where used: they cost the runtime's start-up ~10 ms.
from .protocol import (
    BINARY_FILE,
    INVALID_PARAMS,
    IO_ERROR,
    NOT_A_FILE,
    NOT_FOUND,
    PATCH_AMBIGUOUS,
    PATCH_NO_MATCH,
    PATH_DENIED,
    RpcError,
)

_SKIP_DIRS = {".git", "node_modules", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"}
_MAX_LINE = 2000
CHUNK = 512 * 1024


class FileOps:
    def __init__(self, workspace: str, roots: Sequence[str]) -> None:
        self.workspace = workspace
        self.roots = [os.path.realpath(r) for r in roots]
        self._uploads: dict[str, Any] = {}

    # -- paths -----------------------------------------------------------------------------

    def resolve(self, path: str) -> str:
        if not isinstance(path, str) or not path:
            raise RpcError(INVALID_PARAMS, "path must be a non-empty string")
        full = os.path.realpath(os.path.join(self.workspace, os.path.expanduser(path)))
        for root in self.roots:
            if full == root or full.startswith(root.rstrip("/") + "/"):
                return full
        raise RpcError(PATH_DENIED, "%s is outside the allowed roots %s" % (path, ", ".join(self.roots)))

    # -- read / write / patch --------------------------------------------------------------

    def read(self, path: str, offset: int = 1, limit: int = 2000, numbered: bool = True) -> dict[str, Any]:
        full = self._existing_file(path)
        with open(full, "rb") as fh:
            if b"\0" in fh.read(8192):
                raise RpcError(BINARY_FILE, "%s looks binary; use fs.download for its bytes" % path)
            fh.seek(0)
            lines: list[str] = []
            total = 0
            start = max(1, offset)
            for total, raw in enumerate(fh, 1):
                if start <= total < start + limit:
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if len(line) > _MAX_LINE:
                        line = line[:_MAX_LINE] + " [... line cut at %d characters]" % _MAX_LINE
                    lines.append("%6d\t%s" % (total, line) if numbered else line)
        end = start + len(lines) - 1
        return {
            "path": full,
            "content": "\n".join(lines),
            "start": start,
            "end": end,
            "total_lines": total,
            "more": end < total,
        }

    def write(
        self, path: str, content: str | None = None, data: str | None = None, mode: int | None = None
    ) -> dict[str, Any]:
        if (content is None) == (data is None):
            raise RpcError(INVALID_PARAMS, "give exactly one of content (text) or data (base64)")
        full = self.resolve(path)
        payload = content.encode("utf-8", "surrogateescape") if content is not None else _b64(data)
        self._atomic_write(full, payload, mode)
        return {"path": full, "bytes": len(payload)}

    def patch(self, path: str, old: str, new: str, replace_all: bool = False) -> dict[str, Any]:
        if not old:
            raise RpcError(INVALID_PARAMS, "old must be non-empty")
        full = self._existing_file(path)
        with open(full, encoding="utf-8", errors="surrogateescape", newline="") as fh:
            text = fh.read()
        count = text.count(old)
        if count == 0:
            raise RpcError(
                PATCH_NO_MATCH,
                "the text to replace is not in %s" % path,
                {"closest": _closest_lines(text, old)},
            )
        if count > 1 and not replace_all:
            lines = [text.count("\n", 0, m.start()) + 1 for m in re.finditer(re.escape(old), text)]
            raise RpcError(
                PATCH_AMBIGUOUS,
                "the text to replace occurs %d times in %s (lines %s); "
                "add context to make it unique or set replace_all" % (count, path, lines[:20]),
                {"count": count, "lines": lines[:100]},
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        self._atomic_write(full, updated.encode("utf-8", "surrogateescape"), None)
        import difflib

        diff = "".join(difflib.unified_diff(text.splitlines(True), updated.splitlines(True), path, path, n=2))
        return {"path": full, "replacements": count if replace_all else 1, "diff": diff[:20000]}

    def _atomic_write(self, full: str, payload: bytes, mode: int | None) -> None:
        """Write to a temporary file beside `full`, then rename it over: a reader sees the old file or the
        new one, never half of one. No fsync: it cost more than the rest of a 1 MB write, and a sandbox's
        workspace is scratch that a host crash takes with it."""
        directory = os.path.dirname(full)
        try:
            os.makedirs(directory, exist_ok=True)
            if mode is None and os.path.exists(full):
                mode = stat_mod.S_IMODE(os.stat(full).st_mode)
            fd, tmp = tempfile.mkstemp(prefix=".hermetic-", dir=directory)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(payload)
                os.chmod(tmp, mode if mode is not None else 0o644)
                os.replace(tmp, full)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
        except IsADirectoryError as exc:
            raise RpcError(NOT_A_FILE, "%s is a directory" % full) from exc
        except OSError as exc:
            raise RpcError(IO_ERROR, "cannot write %s: %s" % (full, exc.strerror or exc)) from exc

    def _existing_file(self, path: str) -> str:
        full = self.resolve(path)
        if not os.path.exists(full):
            raise RpcError(NOT_FOUND, "%s does not exist" % path)
        if not os.path.isfile(full):
            raise RpcError(NOT_A_FILE, "%s is not a regular file" % path)
        return full

    # -- list / stat / search --------------------------------------------------------------

    def list(
        self, path: str = ".", depth: int = 1, hidden: bool = False, limit: int = 1000
    ) -> dict[str, Any]:
        full = self.resolve(path)
        if not os.path.isdir(full):
            raise RpcError(
                NOT_FOUND if not os.path.exists(full) else NOT_A_FILE, "%s is not a directory" % path
            )
        entries: list[dict[str, Any]] = []
        truncated = False
        for root, dirs, files in os.walk(full):
            level = root[len(full) :].count(os.sep)
            dirs[:] = sorted(d for d in dirs if (hidden or not d.startswith(".")) and d not in _SKIP_DIRS)
            for name in dirs + sorted(files):
                if not hidden and name.startswith("."):
                    continue
                if len(entries) >= limit:
                    truncated = True
                    break
                entries.append(
                    _describe(os.path.join(root, name), os.path.relpath(os.path.join(root, name), full))
                )
            if truncated or level + 1 >= depth:
                dirs[:] = []
        return {"path": full, "entries": entries, "truncated": truncated}

    def stat(self, path: str) -> dict[str, Any]:
        full = self.resolve(path)
        if not os.path.lexists(full):
            return {"path": full, "exists": False}
        info = _describe(full, path)
        info.update(exists=True, path=full)
        return info

    def search(
        self,
        pattern: str,
        path: str = ".",
        glob: str | None = None,
        literal: bool = False,
        ignore_case: bool = False,
        limit: int = 200,
    ) -> dict[str, Any]:
        full = self.resolve(path)
        if not os.path.exists(full):
            raise RpcError(NOT_FOUND, "%s does not exist" % path)
        if not literal:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise RpcError(INVALID_PARAMS, "bad regular expression: %s" % exc) from exc
        rg = shutil.which("rg")
        finder = _search_rg if rg else _search_python
        matches: list[dict[str, Any]] = []
        for match in finder(pattern, full, glob, literal, ignore_case):
            if len(matches) >= limit:
                return {"matches": matches, "truncated": True, "engine": "rg" if rg else "python"}
            matches.append(match)
        return {"matches": matches, "truncated": False, "engine": "rg" if rg else "python"}

    # -- tar transfer ----------------------------------------------------------------------

    def fingerprint(self) -> dict[str, Any]:
        """A hash of the workspace's tree (names, sizes, modes, mtimes): equal when nothing changed, so
        a checkpoint can be skipped without copying anything."""
        digest = hashlib.sha256()
        entries = 0
        for root, dirs, files in os.walk(self.workspace):
            dirs.sort()
            for name in sorted(files) + dirs:
                full = os.path.join(root, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                entries += 1
                digest.update(
                    b"%s\0%d\0%d\0%d\n" % (os.fsencode(full), st.st_size, st.st_mode, st.st_mtime_ns)
                )
        return {"fingerprint": digest.hexdigest(), "entries": entries}

    def upload(self, transfer: str, dest: str, data: str, final: bool) -> dict[str, Any]:
        """Receive a tar archive in chunks; on the final chunk unpack it under dest."""
        target = self.resolve(dest)
        spool = self._uploads.get(transfer)
        if spool is None:
            spool = self._uploads[transfer] = tempfile.TemporaryFile()  # noqa: SIM115 (lives across requests)
        spool.write(_b64(data))
        if not final:
            return {"received": spool.tell()}
        del self._uploads[transfer]
        size = spool.tell()
        spool.seek(0)
        import tarfile

        try:
            os.makedirs(target, exist_ok=True)
            with tarfile.open(fileobj=spool, mode="r:*") as archive:
                members = [m for m in archive.getmembers() if _safe_member(m)]
                skipped = len(archive.getmembers()) - len(members)
                archive.extractall(target, members=members)
        except (tarfile.TarError, OSError) as exc:
            raise RpcError(IO_ERROR, "cannot unpack upload into %s: %s" % (dest, exc)) from exc
        finally:
            spool.close()
        return {"path": target, "bytes": size, "files": len(members), "skipped": skipped}

    def download(self, path: str, emit: Callable[[str], None]) -> dict[str, Any]:
        """Send `path` (file or directory) as a tar archive in base64 chunks through `emit`."""
        full = self.resolve(path)
        if not os.path.exists(full):
            raise RpcError(NOT_FOUND, "%s does not exist" % path)
        import tarfile

        sink = _ChunkSink(emit)
        with tarfile.open(fileobj=cast(Any, sink), mode="w|", format=tarfile.PAX_FORMAT) as archive:
            archive.add(full, arcname=os.path.basename(full.rstrip("/")) or ".")
        sink.flush()
        return {"bytes": sink.total, "chunks": sink.chunks}


class _ChunkSink:
    """A write-only file object that emits base64 chunks as it fills."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._buf = bytearray()
        self.total = 0
        self.chunks = 0

    def write(self, data: bytes) -> int:
        self._buf += data
        self.total += len(data)
        while len(self._buf) >= CHUNK:
            self._send(bytes(self._buf[:CHUNK]))
            del self._buf[:CHUNK]
        return len(data)

    def flush(self) -> None:
        if self._buf:
            self._send(bytes(self._buf))
            self._buf.clear()

    def _send(self, chunk: bytes) -> None:
        self.chunks += 1
        self._emit(base64.b64encode(chunk).decode("ascii"))


def _b64(data: str | None) -> bytes:
    try:
        return base64.b64decode(data or "", validate=True)
    except ValueError as exc:
        raise RpcError(INVALID_PARAMS, "data is not valid base64") from exc


def _safe_member(member: Any) -> bool:
    """No absolute paths, no '..', no links pointing out, no devices (tarfile's 'data' filter, for 3.9)."""
    name = member.name
    if name.startswith("/") or ".." in name.split("/"):
        return False
    if member.issym() or member.islnk():
        target = member.linkname
        if target.startswith("/") or ".." in os.path.normpath(
            os.path.join(os.path.dirname(name), target)
        ).split("/"):
            return False
    return member.isfile() or member.isdir() or member.issym() or member.islnk()


def _describe(full: str, rel: str) -> dict[str, Any]:
    try:
        st = os.lstat(full)
    except OSError:
        return {"name": rel, "type": "unknown"}
    if stat_mod.S_ISLNK(st.st_mode):
        kind = "symlink"
    elif stat_mod.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat_mod.S_ISREG(st.st_mode):
        kind = "file"
    else:
        kind = "other"
    info: dict[str, Any] = {
        "name": rel,
        "type": kind,
        "size": st.st_size,
        "mode": oct(stat_mod.S_IMODE(st.st_mode)),
        "mtime": st.st_mtime,
        "uid": st.st_uid,
        "gid": st.st_gid,
    }
    if kind == "symlink":
        info["target"] = os.readlink(full)
    return info


def _closest_lines(text: str, old: str) -> list[str]:
    import difflib

    first = old.strip().splitlines()[0] if old.strip() else old
    return difflib.get_close_matches(first, text.splitlines(), n=3, cutoff=0.5)


def _search_rg(
    pattern: str, full: str, glob: str | None, literal: bool, ignore_case: bool
) -> Iterator[dict[str, Any]]:
    cmd = ["rg", "--json", "--max-columns", "500", "--max-count", "1000"]
    if literal:
        cmd.append("--fixed-strings")
    if ignore_case:
        cmd.append("--ignore-case")
    if glob:
        cmd += ["--glob", glob]
    cmd += ["--", pattern, full]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    try:
        for raw in proc.stdout:
            event = json.loads(raw)
            if event.get("type") != "match":
                continue
            data = event["data"]
            yield {
                "path": data["path"].get("text", ""),
                "line": data["line_number"],
                "text": data["lines"].get("text", "").rstrip("\n")[:_MAX_LINE],
            }
    finally:
        proc.kill()
        proc.wait()


def _search_python(
    pattern: str, full: str, glob: str | None, literal: bool, ignore_case: bool
) -> Iterator[dict[str, Any]]:
    import fnmatch

    flags = re.IGNORECASE if ignore_case else 0
    regex = re.compile(re.escape(pattern) if literal else pattern, flags)
    paths = [full] if os.path.isfile(full) else _walk_files(full)
    for file_path in paths:
        if glob and not fnmatch.fnmatch(os.path.basename(file_path), glob):
            continue
        try:
            with open(file_path, "rb") as fh:
                if b"\0" in fh.read(8192):
                    continue
                fh.seek(0)
                for number, raw in enumerate(fh, 1):
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if regex.search(line):
                        yield {"path": file_path, "line": number, "text": line[:_MAX_LINE]}
        except OSError:
            continue


def _walk_files(top: str) -> Iterator[str]:
    for root, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield os.path.join(root, name)
