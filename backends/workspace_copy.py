"""Copying a workspace directory as shell commands: the same text runs on this host (local backend)
and on an SSH host, so both copy the same way. GNU cp with --reflink=auto shares blocks where the
filesystem can (btrfs, xfs); elsewhere it is a plain copy. A snapshot's save on this host takes the
same steps in this process (`save_here`): one cp to start, where the shell's text starts eight more
programs around it (10 ms of a local checkpoint's 12)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

from .errors import SandboxError
from .snapshots import PARTIAL

GONE = 3
"""Exit status of a copy whose source directory is gone."""


def shell_path(path: str) -> str:
    """A path as a shell word; a leading ~/ stays the remote user's home."""
    if path == "~" or path.startswith("~/"):
        return '"$HOME"' + (shlex.quote(path[1:]) if len(path) > 1 else "")
    return shlex.quote(path)


def copy_into(source: str, dest: str) -> str:
    """Command: copy the contents of directory `source` into directory `dest` (created if missing)."""
    src, dst = shell_path(source), shell_path(dest)
    return (
        f"[ -d {src} ] || {{ echo 'directory '{src}' is gone' >&2; exit {GONE}; }}; "
        f"mkdir -p -- {dst} && cp -a --reflink=auto -- {src}/. {dst}/"
    )


def save_copy(source: str, dest: str) -> str:
    """Command: copy directory `source` to `dest` whole or not at all (via dest.partial, removed on
    failure), then print the copy's size in bytes and its absolute path."""
    src, dst, tmp = shell_path(source), shell_path(dest), shell_path(dest + PARTIAL)
    return (
        f"set -e; trap 'rm -rf -- {tmp}' EXIT; "
        f"[ -d {src} ] || {{ echo 'directory '{src}' is gone' >&2; exit {GONE}; }}; "
        f'mkdir -p -- "$(dirname -- {dst})"; rm -rf -- {tmp}; mkdir -- {tmp}; '
        f"cp -a --reflink=auto -- {src}/. {tmp}/; [ -d {src} ] || exit {GONE}; "
        f"mv -T -- {tmp} {dst}; trap - EXIT; "
        f'printf \'%s %s\\n\' "$(du -sb -- {dst} | cut -f1)" "$(cd -- {dst} && pwd -P)"'
    )


def save_here(source: str, dest: str) -> tuple[int, str]:
    """save_copy's steps on this host: `dest` whole or not at all; returns its size in bytes (as du -sb
    counts) and its absolute path. Raises SandboxError (the source is gone, cp failed)."""
    partial = dest + PARTIAL
    if not os.path.isdir(source):
        raise SandboxError(f"directory {source} is gone")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.rmtree(partial, ignore_errors=True)
    try:
        os.mkdir(partial)
        done = subprocess.run(
            ["cp", "-a", "--reflink=auto", "--", f"{source}/.", f"{partial}/"], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SandboxError(done.stderr.strip() or f"cp: exit status {done.returncode}")
        if not os.path.isdir(source):
            raise SandboxError(f"directory {source} is gone")
        os.rename(partial, dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return _tree_bytes(dest), os.path.realpath(dest)


def _tree_bytes(root: str) -> int:
    """The apparent size of a tree, directories included, each hard-linked file once (du -sb)."""
    seen: set[tuple[int, int]] = set()
    total = os.lstat(root).st_size
    stack = [root]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                if st.st_nlink > 1 and not entry.is_dir(follow_symlinks=False):
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                total += st.st_size
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return total


def parse_saved(output: str) -> tuple[int, str]:
    """What save_copy printed: (bytes, absolute path)."""
    size, _, path = output.strip().partition(" ")
    return int(size), path


def remove_dir(path: str) -> str:
    """Command: remove a directory and what it holds (no error when it is gone already)."""
    return f"rm -rf -- {shell_path(path)}"
