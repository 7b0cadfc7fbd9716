"""Browser figures per backend: launching a browser session, navigate + ARIA snapshot of a local page, and
a session's first navigation when its sandbox comes from the warm pool with the browser up (issue 38's
target: at most 200 ms), with what a warm browser costs the sandbox holding it.

    python -m bench.browser [-n 10] [--backends docker,local]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from functools import partial
from pathlib import Path

from backends import Backend, BackendUnavailable, Sandbox, SandboxSpec, create_backend
from control_plane.config.settings import Limits, load_settings
from control_plane.sandbox_manager import SandboxManager, base_spec
from control_plane.tools.browser import NavigateArgs, browser_navigate
from control_plane.tools.registry import ToolContext

from . import targets
from .stats import Figure, Results, cpu_noise, print_targets, report, sample

IMAGE = "hermetic-sandbox:browser"
PORT = 8765
PAGE = "<!doctype html><title>Bench page</title><h1>Bench</h1><input aria-label='Name'>" + "".join(
    f"<p><a href='#{i}'>link {i}</a> <button>button {i}</button></p>" for i in range(50)
)


WAIT = 300.0  # seconds a refill (a sandbox and its browser) may take on a busy machine
MIB = 1 << 20
SETTLE = 2.0
"""Seconds a warm sandbox waits in the pool before the next session takes it, as one does between sessions:
Chromium goes on starting its helpers for a second or two after its first page answers."""


def browser_sandbox(backend: Backend) -> Sandbox:
    """A browser sandbox serving the bench page on its own loopback."""
    return serve(backend.create(SandboxSpec(image=IMAGE, memory="1g", pids=512)))


def serve(sandbox: Sandbox) -> Sandbox:
    """Serve the bench page on the sandbox's own loopback (its network is none)."""
    sandbox.call("fs.write", {"path": "bench.html", "content": PAGE})
    sandbox.call("proc.spawn", {"command": f"python3 -m http.server {PORT} --bind 127.0.0.1"})
    # a whole GET, not a connect: the server's first answer (its lazy imports, mime types) is not timed
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{PORT}/bench.html')"
    sandbox.run(f'until python3 -c "{probe}" 2>/dev/null; do sleep 0.05; done')
    return sandbox


def launches(sandbox: Sandbox, n: int) -> list[float]:
    """Seconds to the first answer of a new session (Playwright's driver, Chromium, a blank page);
    closing the session again is not timed."""
    out = []
    for i in range(n):
        start = time.perf_counter()
        sandbox.call("browser.snapshot", {"session": f"launch-{i}"})
        out.append(time.perf_counter() - start)
        sandbox.call("browser.close", {"session": f"launch-{i}"})
    return out


def first_navigations(backend: Backend, n: int) -> Figure:
    """Seconds from a new session's first sandbox use to its first browser_navigate's result (a page served
    on the sandbox's loopback), the sandbox from a warm pool (pool.size 1, the browser toolset on); the
    pool refills between samples, the warm sandbox waits SETTLE seconds and the page's server starts, all
    untimed; the pool's refill for the next session runs during the timed part, as it does for a real one.
    The note: what the warm sandbox holds (its memory and pids, by the backend's own accounting) against a
    plain one of the same spec."""
    with tempfile.TemporaryDirectory() as root:
        settings = load_settings(root=root, backend=backend.name, toolsets=["browser"], pool={"size": 1})
        spec = base_spec(settings)
        manager = SandboxManager(settings, backend=lambda: backend)
        manager.prefill()
        pool = manager._pool
        assert pool is not None
        out: list[float] = []
        held: list[tuple[int, int]] = []
        try:
            for i in range(n):
                if not pool.wait_ready(spec, WAIT):
                    raise SystemExit(f"the pool did not refill within {WAIT:g} s")
                time.sleep(SETTLE)
                session = f"bench-{i}"
                start = time.perf_counter()
                sandbox = manager.get(session)
                taken = time.perf_counter() - start
                stats = sandbox.stats()
                held.append((stats.memory_bytes, stats.pids))
                serve(sandbox)
                ctx = ToolContext(session, "call", Limits(), partial(manager.get, session))
                start = time.perf_counter()
                page = browser_navigate(ctx, NavigateArgs(url=f"http://127.0.0.1:{PORT}/bench.html"))
                out.append(taken + time.perf_counter() - start)
                if "Bench page" not in str(page):
                    raise SystemExit(f"the first navigation did not show the page: {page}")
                manager.release(session)
        finally:
            manager.close_all()
        with backend.create(spec) as plain:
            plain.runtime.shell_open(session="default")
            bare = plain.stats()
    memory = sorted(m for m, _ in held)[len(held) // 2]
    pids = sorted(p for _, p in held)[len(held) // 2]
    note = (
        f"warm sandbox {memory / MIB:.0f} MiB, {pids} pids; "
        f"without a browser {bare.memory_bytes / MIB:.0f} MiB, {bare.pids} pids"
    )
    extra = {"memory_mib": memory / MIB, "pids": pids, "plain_memory_mib": bare.memory_bytes / MIB}
    return Figure(out, note, extra | {"plain_pids": bare.pids})


def collect(backends: list[str], n: int) -> Results:
    results: Results = {}
    for name in backends:
        if name == "ssh":  # its host's Chromium is the local one: the local figures stand for it
            continue
        try:
            backend = create_backend(name)
        except BackendUnavailable as exc:
            print(f"skipping {name}: {exc}")
            continue
        results[f"hermetic {name}: first navigation of a session, warm pool, browser up"] = first_navigations(
            backend, max(n // 50, 3)
        )
        with browser_sandbox(backend) as sandbox:
            results[f"hermetic {name}: browser launch (driver + chromium + page)"] = launches(
                sandbox, max(n // 50, 3)
            )
            navigate = {"url": f"http://127.0.0.1:{PORT}/bench.html"}
            results[f"hermetic {name}: navigate + ARIA snapshot, local page"] = sample(
                partial(sandbox.call, "browser.navigate", navigate), max(n // 10, 3)
            )
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", "--iterations", type=int, default=500, help="as python -m bench's -n")
    parser.add_argument("--backends", default="docker,local")
    args = parser.parse_args()
    noise_start, load = cpu_noise(), os.getloadavg()[0]
    results = collect([b for b in args.backends.split(",") if b], args.iterations)
    noise = (noise_start, cpu_noise())
    path = report("Browser", results, Path(__file__).parent / "results", {"cpu_loop_ms": noise, "load": load})
    checked = [row for row in targets.check(results) if row["measured"] != "not measured"]
    print_targets([(str(r["target"]), str(r["measured"]), bool(r["met"])) for r in checked], noise, path)
    print(f"load average at start: {load:.2f}, at end: {os.getloadavg()[0]:.2f}")
