"""The skill store's database opened by several processes at once (replicas starting together on one
profile home): every one opens it, none gets "database is locked"."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from control_plane.skills.store import SkillStore

PROCESSES = 8


def _open(path: str, ready: multiprocessing.synchronize.Barrier, errors: multiprocessing.Queue) -> None:
    ready.wait(30)  # all at the same moment
    try:
        SkillStore(Path(path)).execute("SELECT count(*) FROM skills")
    except Exception as exc:  # reported to the test, which names it
        errors.put(f"{type(exc).__name__}: {exc}")


def test_processes_opening_a_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    spawn = multiprocessing.get_context("spawn")
    for attempt in range(5):  # a fresh database each time: the first creation is the race
        path = tmp_path / f"skills-{attempt}.db"
        ready, errors = spawn.Barrier(PROCESSES), spawn.Queue()
        workers = [spawn.Process(target=_open, args=(str(path), ready, errors)) for _ in range(PROCESSES)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert [w.exitcode for w in workers] == [0] * PROCESSES
        found = [errors.get() for _ in range(errors.qsize())] if not errors.empty() else []
        assert found == [], f"attempt {attempt}: {found}"
