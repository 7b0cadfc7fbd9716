"""The spare interpreter kept for execute_code's next script (sandboxes/script_host.py): one is kept while
the table is open, none survives its close (a refill racing the close discards what it started)."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from sandboxes import script_host
from sandboxes.script_host import Spares


def _children() -> set[int]:
    pid = os.getpid()
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(p) for p in text.split()}


def test_a_spare_is_kept_until_close(tmp_path: Path) -> None:
    before = _children()
    spares = Spares(str(tmp_path), dict(os.environ))
    spares._refill()  # what refill()'s thread runs, here on this thread so its child is ours to see
    assert len(_children() - before) == 1
    spares.close()
    assert _children() == before


def test_a_refill_finishing_after_close_keeps_nothing(tmp_path: Path) -> None:
    before = _children()
    spares = Spares(str(tmp_path), dict(os.environ))
    spares.close()
    spares._refill()  # a script ended just before the close; its refill ends after it
    assert _children() == before
    spares.refill()  # and one asked for after the close starts nothing
    assert not [t for t in threading.enumerate() if t.name == "script-spare"]
    assert _children() == before


def test_a_script_that_comes_while_the_spare_is_made_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One interpreter, not two: the script takes the spare being made instead of starting its own."""
    made: list[object] = []
    go = threading.Event()

    class SlowHost:
        def __init__(self, cwd: str, env: dict[str, str]) -> None:
            go.wait(timeout=60)  # the refill's interpreter is still starting
            made.append(self)
            self.proc = subprocess.Popen(["sleep", "60"])

        def discard(self) -> None:
            self.proc.kill()
            self.proc.wait()

    monkeypatch.setattr(script_host, "Host", SlowHost)
    spares = Spares(str(tmp_path), dict(os.environ))
    spares.refill()
    taken: list[object] = []
    taker = threading.Thread(target=lambda: taken.append(spares.take()))
    taker.start()
    taker.join(timeout=0.5)  # it waits for the refill (without the wait it would start its own)
    go.set()
    taker.join(timeout=60)
    try:
        assert len(made) == 1 and taken == made
    finally:
        for host in made:
            host.discard()  # type: ignore[attr-defined]
        spares.close()
