"""Copying a workspace directory as shell commands: the same text runs on this host (local backend)
and on an SSH host, so both copy the same way. GNU cp with --reflink=auto shares blocks where the
filesystem can (btrfs, xfs); elsewhere it is a plain copy."""

from __future__ import annotations

import shlex

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


def parse_saved(output: str) -> tuple[int, str]:
    """What save_copy printed: (bytes, absolute path)."""
    size, _, path = output.strip().partition(" ")
    return int(size), path


def remove_dir(path: str) -> str:
    """Command: remove a directory and what it holds (no error when it is gone already)."""
    return f"rm -rf -- {shell_path(path)}"
