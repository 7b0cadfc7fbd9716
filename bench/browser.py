"""Browser figures per backend: launching a browser session, and navigate + ARIA snapshot of a local page."""

from __future__ import annotations

import time
from functools import partial

from backends import BackendUnavailable, Sandbox, SandboxSpec, create_backend

from .stats import sample

IMAGE = "hermetic-sandbox:browser"
PORT = 8765
PAGE = "<!doctype html><title>Bench page</title><h1>Bench</h1><input aria-label='Name'>" + "".join(
    f"<p><a href='#{i}'>link {i}</a> <button>button {i}</button></p>" for i in range(50)
)


def browser_sandbox(name: str) -> Sandbox | None:
    """A browser sandbox serving the bench page on its own loopback."""
    try:
        backend = create_backend(name)
    except BackendUnavailable as exc:
        print(f"skipping {name}: {exc}")
        return None
    sandbox = backend.create(SandboxSpec(image=IMAGE, memory="1g", pids=512))
    sandbox.call("fs.write", {"path": "bench.html", "content": PAGE})
    sandbox.call("proc.spawn", {"command": f"python3 -m http.server {PORT} --bind 127.0.0.1"})
    probe = f"import socket; socket.create_connection(('127.0.0.1', {PORT}))"
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


def collect(backends: list[str], n: int) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {}
    for name in backends:
        if name == "ssh":  # its host's Chromium is the local one: the local figures stand for it
            continue
        sandbox = browser_sandbox(name)
        if sandbox is None:
            continue
        with sandbox:
            results[f"hermetic {name}: browser launch (driver + chromium + page)"] = launches(
                sandbox, max(n // 50, 3)
            )
            navigate = {"url": f"http://127.0.0.1:{PORT}/bench.html"}
            results[f"hermetic {name}: navigate + ARIA snapshot, local page"] = sample(
                partial(sandbox.call, "browser.navigate", navigate), max(n // 10, 3)
            )
    return results
