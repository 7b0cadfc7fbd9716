"""File watching with inotify (through ctypes: the runtime is stdlib-only): recursive, debounced and
bounded. Events: create, modify, delete, move (with `from`), and overflow when some were lost.

A batch is sent once the tree has been quiet for `debounce` seconds (or MAX_BATCH_DELAY after its first
event); within a batch a path's repeated events collapse, and a create followed by writes stays one
create. A directory that appears in the tree is watched at once and what it already holds is reported
as created (it may have been filled before its watch existed). No polling: the thread sleeps in poll(2)
on the inotify descriptor."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import itertools
import json
import os
import select
import struct
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from .protocol import INVALID_PARAMS, NOT_FOUND, RESOURCE_EXHAUSTED, RpcError

if TYPE_CHECKING:  # the shapes are for mypy: importing them would cost the runtime's start-up
    from .contract import FsUnwatchResult, FsWatchResult

IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x8, 0x40, 0x80
IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF = 0x100, 0x200, 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_DONT_FOLLOW, IN_EXCL_UNLINK = 0x02000000, 0x04000000
MASK = (IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF) | (
    IN_MOVE_SELF | IN_DONT_FOLLOW | IN_EXCL_UNLINK
)
_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)
MAX_BATCH_DELAY = 0.25
DEFAULT_DEBOUNCE = 0.005
DEFAULT_LIMIT = 1000

_libc: Any = None


def _inotify() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


class Watcher:
    """One watched path (a directory, recursively unless told not to, or a file)."""

    def __init__(self, root: str, recursive: bool, debounce: float, limit: int) -> None:
        self.root = root
        self.recursive = recursive
        self.debounce = debounce
        self.limit = limit
        libc = _inotify()
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise RpcError(RESOURCE_EXHAUSTED, "cannot watch: %s" % os.strerror(ctypes.get_errno()))
        self._wake, self._waker = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._dirs: dict[int, str] = {}
        self._batch: dict[tuple[str, str], dict[str, Any]] = {}
        self._moves: dict[int, dict[str, Any]] = {}
        self._dropped = 0
        self._stopped = False
        self._closing = threading.Lock()  # stop() never writes to a descriptor _close() gave back
        self._closed = False
        self.ended: str | None = None
        try:
            if os.path.isdir(root):
                self._add_tree(root, report=False)
            else:
                self._add(root)
        except BaseException:
            self.close()
            raise

    # -- watches ---------------------------------------------------------------------------

    def _add(self, path: str) -> None:
        wd = _inotify().inotify_add_watch(self._fd, os.fsencode(path), MASK)
        if wd >= 0:
            self._dirs[wd] = path
            return
        code = ctypes.get_errno()
        if code == errno.ENOSPC:  # fs.inotify.max_user_watches: say so, never miss silently
            self._overflow(1)
        elif code not in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):  # raced away, or not ours
            raise RpcError(INVALID_PARAMS, "cannot watch %s: %s" % (path, os.strerror(code)))

    def _add_tree(self, top: str, report: bool) -> None:
        """Watch `top` and the directories under it; with `report`, what they hold is a create."""
        self._add(top)
        if not self.recursive and not report:
            return
        for base, dirs, files in os.walk(top):
            for name in dirs:
                path = os.path.join(base, name)
                if report:
                    self._record("create", path, True)
                if self.recursive:
                    self._add(path)
            if report:
                for name in files:
                    self._record("create", os.path.join(base, name), False)
            if not self.recursive:
                break

    # -- events ----------------------------------------------------------------------------

    def _record(self, kind: str, path: str, is_dir: bool, source: str | None = None) -> None:
        if kind == "modify" and (("create", path) in self._batch or ("modify", path) in self._batch):
            return  # a write to a file just created (or already modified) in this batch
        if (kind, path) in self._batch:
            return
        if len(self._batch) >= self.limit:
            self._overflow(1)
            return
        event: dict[str, Any] = {"kind": kind, "path": path, "dir": is_dir}
        if source is not None:
            event["from"] = source
        self._batch[(kind, path)] = event

    def _overflow(self, count: int) -> None:
        self._dropped += count

    def _parse(self, data: bytes) -> None:
        at = 0
        while at + _HEADER.size <= len(data):
            wd, mask, cookie, size = _HEADER.unpack_from(data, at)
            name = data[at + _HEADER.size : at + _HEADER.size + size].rstrip(b"\0")
            at += _HEADER.size + size
            if mask & IN_Q_OVERFLOW:
                self._overflow(1)
                continue
            base = self._dirs.get(wd)
            if base is None:
                continue
            if mask & IN_IGNORED:
                del self._dirs[wd]
                continue
            path = os.path.join(base, os.fsdecode(name)) if name else base
            is_dir = bool(mask & IN_ISDIR)
            if mask & (IN_DELETE_SELF | IN_MOVE_SELF) and base == self.root:
                self._record("delete", path, os.path.isdir(path))
                self.ended = "the watched path was deleted or moved away"
            elif mask & IN_CREATE:
                self._record("create", path, is_dir)
                if is_dir and self.recursive:
                    self._add_tree(path, report=True)
            elif mask & (IN_MODIFY | IN_CLOSE_WRITE) and not is_dir:
                self._record("modify", path, False)
            elif mask & IN_DELETE:
                self._record("delete", path, is_dir)
            elif mask & IN_MOVED_FROM:
                self._moves[cookie] = {"path": path, "dir": is_dir}
            elif mask & IN_MOVED_TO:
                self._moved_to(cookie, path, is_dir)

    def _moved_to(self, cookie: int, path: str, is_dir: bool) -> None:
        source = self._moves.pop(cookie, None)
        if source is None:  # moved in from outside the tree
            self._record("create", path, is_dir)
            if is_dir and self.recursive:
                self._add_tree(path, report=True)
            return
        self._record("move", path, is_dir, source["path"])
        if is_dir:  # its watches keep working under the new name: rename what we call them
            old = source["path"]
            for wd, known in list(self._dirs.items()):
                if known == old or known.startswith(old + os.sep):
                    self._dirs[wd] = path + known[len(old) :]

    def _take(self) -> list[dict[str, Any]]:
        for source in self._moves.values():  # moved out of the tree: gone from here
            self._record("delete", source["path"], source["dir"])
        self._moves.clear()
        events = list(self._batch.values())
        self._batch.clear()
        if self._dropped:
            events.append({"kind": "overflow", "dropped": self._dropped})
            self._dropped = 0
        return events

    # -- the loop --------------------------------------------------------------------------

    def run(self, emit: Callable[[list[dict[str, Any]]], None]) -> str:
        """Send batches through `emit` until `stop` or the watched path goes; why it ended."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake, select.POLLIN)
        first: float | None = None
        try:
            while not self._stopped and self.ended is None:
                if first is None:
                    wait = None
                else:
                    wait = max(0.0, min(self.debounce, first + MAX_BATCH_DELAY - time.monotonic())) * 1000
                ready = poller.poll(wait)
                if any(fd == self._fd for fd, _ in ready):
                    self._read()
                    if first is None and (self._batch or self._moves or self._dropped):
                        first = time.monotonic()
                    if first is None or time.monotonic() - first < MAX_BATCH_DELAY:
                        continue
                if first is not None:  # quiet for `debounce` (or the batch is old enough)
                    first = None
                    events = self._take()
                    if events:
                        emit(events)
            if self.ended is not None and (events := self._take()):
                emit(events)
            return self.ended or "stopped"
        finally:
            self.close()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return
            self._parse(data)

    def stop(self) -> None:
        self._stopped = True
        with self._closing:
            if not self._closed:
                os.write(self._waker, b"!")

    def close(self) -> None:
        with self._closing:
            if not self._closed:
                self._closed = True
                for fd in (self._fd, self._wake, self._waker):
                    os.close(fd)


class WatchTable:
    """The runtime's watches by the caller's id: `fs.watch` streams `fs.events` until `fs.unwatch`."""

    def __init__(self, resolve: Callable[[str], str]) -> None:
        self._resolve = resolve
        self._watches: dict[str, Watcher] = {}
        self._sockets = itertools.count(1)
        self._lock = threading.Lock()

    def watch(
        self,
        req: Any,
        id: str,
        path: str,
        recursive: bool = True,
        debounce: float = DEFAULT_DEBOUNCE,
        limit: int = DEFAULT_LIMIT,
    ) -> FsWatchResult:
        resolved = self._resolve(path)
        if not os.path.exists(resolved):
            raise RpcError(NOT_FOUND, "no such file or directory: %s" % path)
        if not 1 <= int(limit) <= 100000 or not 0 <= float(debounce) <= 10:
            raise RpcError(INVALID_PARAMS, "limit is 1-100000 events, debounce 0-10 s")
        watcher = Watcher(resolved, bool(recursive), float(debounce), int(limit))
        with self._lock:
            if id in self._watches:
                watcher.close()
                raise RpcError(INVALID_PARAMS, "a watch with id %r exists" % id)
            self._watches[id] = watcher
        req.notify("fs.events", {"watch": id, "events": [], "path": resolved})  # watching from now on
        try:
            ended = watcher.run(lambda events: req.notify("fs.events", {"watch": id, "events": events}))
        finally:
            with self._lock:
                self._watches.pop(id, None)
        return {"watch": id, "ended": ended}

    def serve_socket(self, path: str, client: Any) -> None:
        """A watch for a host connection on the ingress socket: JSON lines, a first `{"watching": PATH}`
        (or `{"error": ...}`), then one event each, then `{"ended": why}`; stops when the host closes."""

        def send(message: dict[str, Any]) -> None:
            client.sendall(json.dumps(message).encode("ascii") + b"\n")

        try:
            resolved = self._resolve(path)
            if not os.path.exists(resolved):
                raise RpcError(NOT_FOUND, "no such file or directory: %s" % path)
            watcher = Watcher(resolved, True, DEFAULT_DEBOUNCE, DEFAULT_LIMIT)
        except RpcError as exc:
            send({"error": exc.message})
            return
        key = "socket-%d" % next(self._sockets)
        with self._lock:
            self._watches[key] = watcher

        def hang_up() -> None:  # the host closed its end (or shut it for writing): stop
            try:
                while client.recv(4096):
                    pass
            except OSError:
                pass
            watcher.stop()

        def emit(events: list[dict[str, Any]]) -> None:
            for event in events:
                send(event)

        threading.Thread(target=hang_up, name="watch-hangup", daemon=True).start()
        try:
            send({"watching": resolved})
            send({"ended": watcher.run(emit)})
        except OSError:  # the host is gone
            watcher.stop()
        finally:
            with self._lock:
                self._watches.pop(key, None)

    def unwatch(self, req: Any, id: str) -> FsUnwatchResult:
        with self._lock:
            watcher = self._watches.get(id)
        if watcher is not None:
            watcher.stop()
        return {"stopped": watcher is not None}

    def close_all(self) -> None:
        with self._lock:
            for watcher in self._watches.values():
                watcher.stop()

    def methods(self) -> dict[str, Callable[..., Any]]:
        return {"fs.watch": self.watch, "fs.unwatch": self.unwatch}
