"""A local snapshot's copy (workspace_copy.save_here): whole or not at all, sized as du -sb sizes it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from backends import SandboxError
from backends.snapshots import PARTIAL
from backends.workspace_copy import save_here


def tree(root: Path) -> Path:
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "a.txt").write_text("hello\n")
    (root / "src" / "deep" / "big").write_bytes(os.urandom(300_000))
    os.link(root / "src" / "a.txt", root / "src" / "same-as-a")
    (root / "src" / "link").symlink_to("a.txt")
    os.chmod(root / "src" / "deep", 0o700)
    return root / "src"


def test_the_copy_is_the_tree_with_its_links_modes_and_du_s_size(tmp_path: Path) -> None:
    source = tree(tmp_path)
    size, path = save_here(str(source), str(tmp_path / "store" / "snap-1"))
    copy = tmp_path / "store" / "snap-1"
    assert path == str(copy.resolve())
    assert (copy / "deep" / "big").read_bytes() == (source / "deep" / "big").read_bytes()
    assert os.readlink(copy / "link") == "a.txt"
    assert (copy / "same-as-a").stat().st_ino == (copy / "a.txt").stat().st_ino  # still one file
    assert (copy / "deep").stat().st_mode & 0o777 == 0o700
    du = subprocess.run(["du", "-sb", str(copy)], capture_output=True, text=True, check=True)
    assert size == int(du.stdout.split()[0])


def test_a_gone_source_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="is gone"):
        save_here(str(tmp_path / "nothing-here"), str(tmp_path / "store" / "snap-1"))
    assert not (tmp_path / "store" / "snap-1").exists()
    assert not list(tmp_path.rglob(f"*{PARTIAL}"))


def test_a_copy_that_cannot_be_put_in_place_leaves_no_partial(tmp_path: Path) -> None:
    source = tree(tmp_path)
    taken = tmp_path / "store" / "snap-1"
    taken.mkdir(parents=True)
    (taken / "other").write_text("a copy already there is not replaced")
    with pytest.raises(OSError):
        save_here(str(source), str(taken))
    assert (taken / "other").read_text() == "a copy already there is not replaced"
    assert not list((tmp_path / "store").glob(f"*{PARTIAL}"))
