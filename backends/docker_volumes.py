"""Copying a Docker volume into another with a short-lived helper container, pausing a sandbox only
for the last, small part of the copy.

The helper runs the sandbox's own image as root with just the capabilities a faithful copy needs to
keep owners and modes (CHOWN, DAC_OVERRIDE, FOWNER, FSETID), no network and a read-only root. It copies
in two passes: `cp -a` of everything while the sandbox runs on, then, with the sandbox paused, a sync
of what changed meanwhile (by type, size, mtime, mode and owner; extra entries removed). The pause is
that second pass over unchanged files, not a container start nor the bulk of the bytes.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from docker.errors import APIError, NotFound
from docker.types import Mount
from requests.exceptions import RequestException

from .channel import readable_poller, wait_readable
from .errors import SandboxError
from .freezer import Pause
from .snapshots import SNAPSHOT_LABEL

STORE_LABEL = "org.hermetic.snapshot-store"
"""On a snapshot's volume: the registry directory its record is in, and the host it is on."""
HOST_LABEL = "org.hermetic.snapshot-host"
COPY_TIMEOUT = 1800.0
"""Seconds a copy may go without a word from its helper before it is abandoned."""
ORPHAN_GRACE = 600.0
"""Seconds a snapshot volume may lack its record (a copy in flight writes the record last)."""

log = logging.getLogger("hermetic.backends.docker")

HELPER_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"]
HELPER_PREFIX = "hm-copy-"
"""The helper's name: calls address it by name, so a socket proxy can tell it from a sandbox."""
# The helper's program (stdlib python3, as in every sandbox image): "waiting" once it is up, wait for
# "copy", the bulk copy, "precopied", wait for "go" (the source is paused then), sync the changes,
# "copied", then the copy's size in bytes.
SYNC = r"""
import os, shutil, stat, subprocess, sys

def attrs(src, dst, st):
    os.chown(dst, st.st_uid, st.st_gid, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(dst, stat.S_IMODE(st.st_mode))
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)

def same(s, d, src, dst):
    if (s.st_mode, s.st_uid, s.st_gid) != (d.st_mode, d.st_uid, d.st_gid):
        return False
    if stat.S_ISLNK(s.st_mode):
        return os.readlink(src) == os.readlink(dst)
    return (s.st_size, s.st_mtime_ns) == (d.st_size, d.st_mtime_ns)

def remove(path, st):
    shutil.rmtree(path) if stat.S_ISDIR(st.st_mode) else os.unlink(path)

def sync(src, dst):
    names = set(os.listdir(src))
    for name in os.listdir(dst):
        if name not in names:
            remove(os.path.join(dst, name), os.lstat(os.path.join(dst, name)))
    for name in names:
        s_path, d_path = os.path.join(src, name), os.path.join(dst, name)
        s = os.lstat(s_path)
        try:
            d = os.lstat(d_path)
        except FileNotFoundError:
            d = None
        if d is not None and stat.S_IFMT(s.st_mode) != stat.S_IFMT(d.st_mode):
            remove(d_path, d)
            d = None
        if stat.S_ISDIR(s.st_mode):
            if d is None:
                os.mkdir(d_path)
            sync(s_path, d_path)
            attrs(s_path, d_path, s)
        elif d is None or not same(s, d, s_path, d_path):
            if d is not None:
                os.unlink(d_path)
            if stat.S_ISLNK(s.st_mode):
                os.symlink(os.readlink(s_path), d_path)
            elif stat.S_ISREG(s.st_mode):
                shutil.copyfile(s_path, d_path)
            elif stat.S_ISFIFO(s.st_mode):
                os.mkfifo(d_path)
            else:
                continue
            attrs(s_path, d_path, s)

print("waiting", flush=True)
if sys.stdin.readline().strip() != "copy":
    sys.exit(2)
subprocess.run(["cp", "-a", "/src/.", "/dst/"], check=True)
print("precopied", flush=True)
if sys.stdin.readline().strip() != "go":
    sys.exit(2)
sync("/src", "/dst")
attrs("/src", "/dst", os.lstat("/src"))
print("copied", flush=True)
total = 0
for root, dirs, files in os.walk("/dst"):
    for name in dirs + files:
        total += os.lstat(os.path.join(root, name)).st_size
print(total, flush=True)
"""


def copy_volume(
    client: Any,
    image: str,
    source: str,
    dest: str,
    dest_labels: dict[str, str],
    pause: Pause | None = None,
    after_bulk: Callable[[], None] | None = None,
) -> tuple[int, float]:
    """Copy volume `source` into volume `dest` (created with `dest_labels`); `pause` holds the container
    still for the second pass (backends/freezer.py). `after_bulk` runs between the passes (what the
    source does while the bulk is copied; tests change it there). Returns (bytes, seconds paused). On
    failure `dest` is removed and SandboxGone (the paused container vanished) or SandboxError is raised."""
    return CopyHelper(client, image, source, dest, dest_labels).copy(pause, after_bulk)


class CopyHelper:
    """A started helper container for one copy of `source` into a new volume `dest`: its program waits
    for the word before it copies anything, so it can be made ahead of the copy (a sandbox keeps one
    ready for its next snapshot). It removes itself when it ends (AutoRemove): a copy does not wait for
    its removal; removing a volume it mounts does (remove_volume)."""

    def __init__(self, client: Any, image: str, source: str, dest: str, dest_labels: dict[str, str]) -> None:
        self._client = client
        self.source, self.dest, self.labels = source, dest, dest_labels
        api = client.api
        try:  # a missing source would be created, empty, by the helper's mount: refuse it instead
            api.inspect_volume(source)
        except NotFound as exc:
            raise SandboxError(f"volume {source} is gone") from exc
        self.name = HELPER_PREFIX + secrets.token_hex(6)
        try:
            api.create_volume(dest, labels=dest_labels)
            api.create_container(**helper_config(api, image, source, dest, dest_labels), name=self.name)
        except (APIError, NotFound) as exc:
            remove_volume(client, dest)
            raise SandboxError(f"could not prepare a copy of volume {source}: {exc}") from exc
        try:
            sock = api.attach_socket(self.name, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            self._raw = getattr(sock, "_sock", sock)
            self._raw.settimeout(COPY_TIMEOUT)  # not the SDK's 60 s: a big copy on a busy host takes longer
            api.start(self.name)
            # made when its program is up, not when its container is: python's start-up in a container
            # (10-15 ms) would otherwise fall to the snapshot that takes a helper made just before
            up = _read_until(self._raw, b"waiting\n")
            if b"waiting\n" not in _payload(up):
                raise SandboxError(f"the copy helper for volume {source} did not start: {_stderr(up)}")
        except BaseException:
            self.discard()
            raise

    def waiting(self) -> bool:
        """Whether it still waits for the word: it says nothing more until then, so a stream with something
        to read has ended (the helper was removed by hand, dockerd restarted). poll, not select: a busy
        control plane's descriptors pass select's limit of 1024."""
        return not wait_readable(readable_poller(self._raw.fileno()), 0)

    def copy(
        self, pause: Pause | None = None, after_bulk: Callable[[], None] | None = None
    ) -> tuple[int, float]:
        """Run the copy (see copy_volume); the helper is used up either way."""
        paused = 0.0
        _mounting(self.name, (self.source, self.dest))  # from now on it may be removing itself
        try:
            self._raw.sendall(b"copy\n")
            out = _read_until(self._raw, b"precopied\n")
            if b"precopied\n" not in _payload(out):
                raise SandboxError(f"copying volume {self.source} failed: {_stderr(out)}")
            if after_bulk is not None:
                after_bulk()
            started = time.monotonic()
            if pause is not None:
                pause.pause()
            try:
                self._raw.sendall(b"go\n")
                out += _read_until(self._raw, SIZE, out)
            finally:
                if pause is not None:
                    pause.resume()
                    paused = time.monotonic() - started
            found = SIZE.search(_payload(out))
            if found is None:
                raise SandboxError(f"copying volume {self.source} failed: {_stderr(out)}")
        except BaseException:
            self.discard()
            raise
        self._raw.close()
        return int(found.group(1)), paused

    def discard(self) -> None:
        """Stop it and remove its volume (a copy that failed, or one that was never asked for)."""
        _mounting(self.name, (self.source, self.dest))
        with contextlib.suppress(OSError):
            self._raw.close()
        _remove_container(self._client, self.name)
        remove_volume(self._client, self.dest)


class SpareHelper:
    """The copy helper a sandbox keeps made ahead for its next snapshot, so that snapshot does not wait
    for a container's create and start (~100-300 ms): made in the background, made again after each
    use, discarded with the sandbox."""

    def __init__(self, make: Callable[[], CopyHelper]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._pending: Future[CopyHelper] | None = None
        self._closed = False

    def refill(self) -> None:
        """Start making one, unless one is made or being made."""
        with self._lock:
            if self._closed or self._pending is not None:
                return
            future: Future[CopyHelper] = Future()
            self._pending = future
        threading.Thread(target=self._fill, args=(future,), name="copy-spare", daemon=True).start()

    def _fill(self, future: Future[CopyHelper]) -> None:
        try:
            future.set_result(self._make())
        except BaseException as exc:  # read by take() or close(), which make do without it
            future.set_exception(exc)

    def take(self, usable: Callable[[CopyHelper], bool]) -> CopyHelper | None:
        """The helper made ahead (waiting for it when it is being made) if it still waits for its word
        and `usable` says yes; else None, and the caller makes its own."""
        with self._lock:
            future, self._pending = self._pending, None
        helper = _made(future)
        if helper is not None and helper.waiting() and usable(helper):
            return helper
        if helper is not None:
            helper.discard()
        return None

    def ready(self) -> CopyHelper | None:
        """The helper made ahead, once made (waiting while it is being made); None when there is none."""
        with self._lock:
            future = self._pending
        return _made(future)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            future, self._pending = self._pending, None
        helper = _made(future)
        if helper is not None:
            helper.discard()


def _made(future: Future[CopyHelper] | None) -> CopyHelper | None:
    if future is None:
        return None
    try:
        return future.result(timeout=COPY_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 (a spare that could not be made: the copy makes its own)
        log.warning("a copy helper made ahead failed: %s", exc)
        return None


SIZE = re.compile(rb"\ncopied\n(\d+)\n")
"""The end of the helper's stdout: the copy is whole, and its size."""


def helper_config(api: Any, image: str, source: str, dest: str, labels: dict[str, str]) -> dict[str, Any]:
    """The helper's container (the arguments of the SDK's create_container, but its name): root with
    HELPER_CAPS only, no network, a read-only root, `source` at /src read-only and `dest` at /dst; it
    removes itself when it ends."""
    return {
        "image": image,
        "command": ["python3", "-c", SYNC],
        "user": "0:0",
        "stdin_open": True,
        "network_disabled": True,
        "labels": labels,
        "host_config": api.create_host_config(
            mounts=[Mount("/src", source, type="volume", read_only=True), Mount("/dst", dest, type="volume")],
            cap_drop=["ALL"],
            cap_add=HELPER_CAPS,
            security_opt=["no-new-privileges"],
            read_only=True,
            network_mode="none",
            pids_limit=64,
            auto_remove=True,
        ),
    }


def _stderr(framed: bytes) -> str:
    """The helper's stderr as far as it came (its last 500 characters): why it failed."""
    return _payload(framed, 2).decode("utf-8", "replace").strip()[-500:] or "the helper ended without a word"


def _read_until(raw: Any, marker: bytes | re.Pattern[bytes], before: bytes = b"") -> bytes:
    """Frames read until the payload (with what came `before`) holds `marker`, or the stream ends."""
    data = b""
    while not _holds(_payload(before + data), marker):
        chunk = raw.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _holds(payload: bytes, marker: bytes | re.Pattern[bytes]) -> bool:
    return marker.search(payload) is not None if isinstance(marker, re.Pattern) else marker in payload


def _payload(framed: bytes, stream: int = 1) -> bytes:
    """One stream's payload of attach frames (tty off: an 8-byte header per frame: stream, 0, 0, 0, size)."""
    out, pos = b"", 0
    while pos + 8 <= len(framed):
        size = int.from_bytes(framed[pos + 4 : pos + 8], "big")
        if pos + 8 + size > len(framed):
            break
        if framed[pos] == stream:
            out += framed[pos + 8 : pos + 8 + size]
        pos += 8 + size
    return out


_mounts: dict[str, set[str]] = {}
"""Volume -> the helpers of this process that mount it, have done their copy (or were discarded) and
may not be removed yet: they remove themselves when they end, a moment later. A helper made ahead is
not here until its copy starts."""
_mounts_lock = threading.Lock()


def _mounting(helper: str, volumes: tuple[str, ...]) -> None:
    with _mounts_lock:
        for volume in volumes:
            _mounts.setdefault(volume, set()).add(helper)


def remove_volume(client: Any, name: str) -> None:
    """Remove a volume, once the helpers of this process that mount it are gone; a volume in use by
    anything else (or already gone) stays as it is, with a warning (or nothing said)."""
    for attempt in (1, 2):
        try:
            client.api.remove_volume(name, force=True)
        except NotFound:
            pass
        except APIError as exc:
            if attempt == 1 and exc.status_code == 409 and _wait_for_helpers(client, name):
                continue
            log.warning("volume %s not removed: %s", name, exc)
        break
    with _mounts_lock:
        _mounts.pop(name, None)


def _finishing(volume: str) -> bool:
    """Whether helpers of this process that did their copy (or were discarded) still mount `volume`."""
    with _mounts_lock:
        return bool(_mounts.get(volume))


def _wait_for_helpers(client: Any, volume: str) -> bool:
    """Wait until the helpers that mount `volume` have removed themselves; False when there were none."""
    with _mounts_lock:
        helpers = set(_mounts.get(volume, ()))
    for helper in helpers:
        try:
            client.api.wait(helper, timeout=60, condition="removed")
        except NotFound:
            pass  # already removed
        except (APIError, RequestException) as exc:
            log.warning("helper %s: waiting for its removal failed: %s", helper, exc)
        with _mounts_lock:
            for mounted in _mounts.values():
                mounted.discard(helper)
    return bool(helpers)


def _remove_container(client: Any, container: str) -> None:
    try:
        client.api.remove_container(container, force=True)
    except (NotFound, APIError) as exc:
        log.debug("ignored: %s", exc)


def snapshot_labels(snapshot_id: str, source: str, store: Path, labels: dict[str, str]) -> dict[str, str]:
    """The labels of a snapshot's volume: whose it is and where its record lives, for the reaper."""
    return {
        **labels,
        SNAPSHOT_LABEL: snapshot_id,
        "org.hermetic.snapshot-of": source,
        STORE_LABEL: str(store.resolve()),
        HOST_LABEL: socket.gethostname(),
    }


def reap_orphaned_snapshots(client: Any) -> int:
    """Remove snapshot volumes of this host whose record is gone (deleted by hand, a test's registry
    removed, a control plane that died mid-copy) and that no helper is copying into, or waiting to;
    returns how many."""
    removed = 0
    now = datetime.datetime.now(datetime.UTC)
    unused = {v.name for v in client.volumes.list(filters={"label": SNAPSHOT_LABEL, "dangling": True})}
    for volume in client.volumes.list(filters={"label": SNAPSHOT_LABEL}):
        if volume.name not in unused and not _finishing(volume.name):
            continue  # a helper copies into it, or one made ahead waits to
        labels = volume.attrs.get("Labels") or {}
        store = labels.get(STORE_LABEL)
        if not store or labels.get(HOST_LABEL) != socket.gethostname():
            continue
        if (Path(store) / f"{labels.get(SNAPSHOT_LABEL)}.json").exists():
            continue
        try:
            age = (now - datetime.datetime.fromisoformat(volume.attrs["CreatedAt"])).total_seconds()
        except (KeyError, ValueError):
            age = ORPHAN_GRACE
        if Path(store).is_dir() and age < ORPHAN_GRACE:
            continue
        remove_volume(client, volume.name)
        removed += 1
    return removed
