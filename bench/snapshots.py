"""Snapshot, fork and restore of a workspace holding 1,000 files / 100 MB, per backend, and the
checkpoint overhead before a write_file call when nothing changed since the last checkpoint.

    python -m bench.snapshots [-n 20] [--backends local,docker,ssh] [--files 1000] [--mb 100]

Docker also reports how long the container was paused (the copy itself; the helper container is
started before the pause). Snapshots made here are deleted again, untimed.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backends import Backend, BackendUnavailable, Sandbox, SandboxSpec, create_backend
from backends.docker import DockerSandbox
from backends.snapshots import SnapshotStore
from control_plane.checkpoints import Checkpoints
from control_plane.config.settings import load_settings
from control_plane.sandbox_manager import SandboxManager

from .stats import Figure, Results, cpu_noise, report

FILL = """
import os, sys
files, size = int(sys.argv[1]), int(sys.argv[2])
for i in range(files):
    os.makedirs("data/d%02d" % (i % 20), exist_ok=True)
    with open("data/d%02d/f%04d.bin" % (i % 20, i), "wb") as fh:
        fh.write(os.urandom(size))
"""


def open_backend(name: str) -> tuple[Backend, Callable[[], None]] | None:
    try:
        if name == "ssh":
            from sshd import SSHDUnavailable, start_sshd

            try:
                server = start_sshd()
            except SSHDUnavailable as exc:
                print(f"skipping ssh: {exc}")
                return None
            return create_backend("ssh", server.config()), server.stop
        return create_backend(name), lambda: None
    except BackendUnavailable as exc:
        print(f"skipping {name}: {exc}")
        return None


def fill(sandbox: Sandbox, files: int, mb: int) -> None:
    sandbox.call("fs.write", {"path": "fill.py", "content": FILL})
    done = sandbox.run(f"python3 fill.py {files} {mb * 1024 * 1024 // files} && du -sh data", timeout=600)
    print(f"  workspace: {done['output'].strip()}")


def collect(name: str, backend: Backend, n: int, files: int, mb: int) -> Results:
    results: Results = {}
    size = f"{files} files, {mb} MB"
    with tempfile.TemporaryDirectory() as root:
        backend.snapshots = SnapshotStore(Path(root) / "snapshots")
        spec = SandboxSpec(memory="1g", disk="2g")
        with backend.create(spec) as sandbox:
            fill(sandbox, files, mb)
            snap_times, fork_times, restore_times, paused_snap, paused_fork = [], [], [], [], []
            for _ in range(n):
                start = time.perf_counter()
                snapshot = sandbox.snapshot()
                snap_times.append(time.perf_counter() - start)
                if isinstance(sandbox, DockerSandbox):
                    paused_snap.append(sandbox.paused_seconds)
                start = time.perf_counter()
                with backend.create(spec.model_copy(update={"from_snapshot": snapshot.id})) as restored:
                    restored.run("true")
                    restore_times.append(time.perf_counter() - start)
                backend.delete_snapshot(snapshot.id)
                start = time.perf_counter()
                child = sandbox.fork()
                child.run("true")
                fork_times.append(time.perf_counter() - start)
                if isinstance(sandbox, DockerSandbox):
                    paused_fork.append(sandbox.paused_seconds)
                child.close()
        results[f"hermetic {name}: snapshot ({size})"] = snap_times
        results[f"hermetic {name}: fork to first command ({size})"] = fork_times
        results[f"hermetic {name}: start from snapshot to first command ({size})"] = restore_times
        if paused_snap:
            results[f"hermetic {name}: container paused during snapshot"] = paused_snap
            results[f"hermetic {name}: container paused during fork"] = paused_fork
    return results


def checkpoint_overhead(name: str, backend: Backend, n: int, files: int, mb: int) -> Results:
    """Checkpoints.before_tool for write_file, the workspace unchanged since the last checkpoint: what
    each writing turn pays when nothing needs copying (a fingerprint and a registry read)."""
    with tempfile.TemporaryDirectory() as root:
        settings = load_settings(root=root, backend=name if name != "ssh" else None)
        manager = SandboxManager(settings, backend=lambda: backend)
        checkpoints = Checkpoints(manager, settings.snapshots)
        try:
            fill(manager.get("bench"), files, mb)
            checkpoints.before_tool("bench", "write_file", {})  # the first one copies: untimed
            samples = []
            for _ in range(n):
                start = time.perf_counter()
                checkpoints.before_tool("bench", "write_file", {})
                samples.append(time.perf_counter() - start)
            taken = len(checkpoints.list("bench"))
            for snapshot in manager.snapshots.list():
                backend.delete_snapshot(snapshot.id)
        finally:
            manager.close_all()
    note = f"{taken} checkpoint copied in all"
    return {f"hermetic {name}: checkpoint before write_file, nothing changed": Figure(samples, note)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--iterations", type=int, default=20)
    parser.add_argument("--backends", default="local,docker,ssh")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "snapshots")
    args = parser.parse_args()
    noise = cpu_noise()
    results: Results = {}
    for name in [b for b in args.backends.split(",") if b]:
        opened = open_backend(name)
        if opened is None:
            continue
        backend, stop = opened
        print(f"{name} ...")
        try:
            results.update(collect(name, backend, args.iterations, args.files, args.mb))
            results.update(checkpoint_overhead(name, backend, args.iterations, args.files, args.mb))
        finally:
            stop()
    extra: dict[str, Any] = {"cpu_noise_ms": [noise, cpu_noise()], "files": args.files, "mb": args.mb}
    print(report("Snapshots and forks", results, args.out, extra))


if __name__ == "__main__":
    main()
