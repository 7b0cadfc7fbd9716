"""File watching on every backend: inotify in the runtime, events streamed over the channel into a
bounded queue; recursive (new directories included), debounced, and overflow is reported, never silent."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from backends import Backend, Sandbox, SandboxSpec
from backends.errors import RuntimeCallError
from backends.watch import FileEvent, Watch


@pytest.fixture(scope="module")
def sandbox(backend: Backend) -> Iterator[Sandbox]:
    with backend.create(SandboxSpec(memory="512m", pids=256)) as sb:
        yield sb


def _until(watch: Watch, done: Callable[[list[FileEvent]], bool], timeout: float = 20) -> list[FileEvent]:
    """Events as they come (each get blocks on the stream) until `done` holds for them."""
    events: list[FileEvent] = []
    deadline = time.monotonic() + timeout
    while not done(events):
        event = watch.get(deadline - time.monotonic())
        assert event is not None, f"not seen in {timeout} s; got {[e.describe() for e in events]}"
        events.append(event)
    return events


def _fresh(sb: Sandbox, name: str) -> str:
    """An empty directory in the sandbox's workspace (on ssh, /tmp is the remote host's, shared)."""
    path = f"{sb.call('sys.info')['workspace']}/watch-{name}"
    sb.run(f"rm -rf {path}; mkdir -p {path}/sub")
    return path


def test_creates_writes_moves_and_deletes_are_seen_in_new_directories_too(sandbox: Sandbox) -> None:
    root = _fresh(sandbox, "tree")
    with sandbox.watch(root) as watch:
        sandbox.run(
            f"(cd {root} && echo hi > a.txt && mkdir -p new/deep && echo x > new/deep/f && "
            "mv a.txt sub/b.txt && mv new renamed && echo y > renamed/deep/g && rm sub/b.txt)"
        )
        expected = {
            ("create", f"{root}/a.txt"),
            ("create", f"{root}/new/deep/f"),
            ("move", f"{root}/sub/b.txt"),
            ("move", f"{root}/renamed"),
            ("create", f"{root}/renamed/deep/g"),  # a watch that followed its directory's rename
            ("delete", f"{root}/sub/b.txt"),
        }
        events = _until(watch, lambda got: expected <= {(e.kind, e.path) for e in got})
    moves = {e.path: e.source for e in events if e.kind == "move"}
    assert moves == {f"{root}/sub/b.txt": f"{root}/a.txt", f"{root}/renamed": f"{root}/new"}
    assert next(e for e in events if e.path == f"{root}/renamed").is_dir
    assert watch.ended == "stopped"


def test_a_write_to_an_existing_file_is_a_modify_and_a_burst_of_writes_collapses(sandbox: Sandbox) -> None:
    root = _fresh(sandbox, "burst")
    sandbox.run(f"touch {root}/log")
    with sandbox.watch(root, debounce=0.2) as watch:
        sandbox.run(
            f"python3 -c \"f = open('{root}/log', 'a')\nfor i in range(200): f.write('x'); f.flush()\""
        )
        events = _until(watch, lambda got: any(e.kind == "modify" for e in got))
        sandbox.run(f"touch {root}/done")
        events += _until(watch, lambda got: any(e.path == f"{root}/done" for e in got))
    modifies = [e for e in events if e.kind == "modify" and e.path == f"{root}/log"]
    assert 1 <= len(modifies) < 50, "200 writes in a burst are one or a few events, not 200"


@pytest.mark.parametrize("where", ["runtime", "client"])
def test_more_events_than_the_queue_holds_are_reported_as_an_overflow(sandbox: Sandbox, where: str) -> None:
    root = _fresh(sandbox, f"flood-{where}")
    bounds = {"limit": 5} if where == "runtime" else {}
    watch = Watch(sandbox, root, debounce=0.2, **bounds, queue_size=3 if where == "client" else 10_000)  # type: ignore[arg-type]
    with watch:
        sandbox.run(f"(cd {root} && mkdir " + " ".join(f"d{i}" for i in range(20)) + ")")
        events = _until(watch, lambda got: sum(e.dropped or 1 for e in got) >= 20)
    overflows = [e for e in events if e.kind == "overflow"]
    assert overflows and sum(e.dropped for e in overflows) + len(events) - len(overflows) == 20
    assert "events were lost" in overflows[0].describe()


def test_deleting_the_watched_directory_ends_the_watch(sandbox: Sandbox) -> None:
    root = _fresh(sandbox, "gone")
    watch = sandbox.watch(root)
    sandbox.run(f"rm -rf {root}")
    events = _until(watch, lambda got: any(e.path == root and e.kind == "delete" for e in got))
    assert watch.get(20) is None and watch.ended == "the watched path was deleted or moved away"
    assert any(e.path == f"{root}/sub" for e in events)
    watch.close()


def test_a_missing_path_is_refused(sandbox: Sandbox) -> None:
    with pytest.raises(RuntimeCallError, match="no such file or directory"):
        sandbox.watch("no-such-watch-dir")
