"""A browser already up in a warm sandbox: what the session pool starts in each of its sandboxes when the
browser toolset is on (`pool.warm_browser`), so a session's first browser call navigates at once."""

from __future__ import annotations

import logging

from backends import RuntimeCallError, Sandbox, SandboxSpec
from backends.pool import Warmup
from sandboxes.protocol import BROWSER_ERROR

log = logging.getLogger(__name__)

BROWSER_IDLE = 300.0
"""Seconds the runtime keeps a browser unused (HERMETIC_BROWSER_IDLE's default in sandboxes/server.py)."""

WARM_PAGE = (
    "document.title = 'w'; document.body.innerHTML = '<h1>w</h1><p>w <a href=\"#\">w</a></p>"
    '<input aria-label="w"><button>w</button>\'; document.body.offsetHeight'
)
"""Rendered once in the blank page of a warm browser, then cleared: its renderer has laid out text and
controls (fonts loaded) and run the snapshot's script, which a session's first page would otherwise wait
for; no navigation, so the session's history stays empty."""


def browser_warmup(spec: SandboxSpec) -> Warmup:
    """Start the "default" browser session (what the browser tools use) in a warm sandbox of `spec`: its
    driver, Chromium and a blank page, which renders WARM_PAGE once and is left blank again (its snapshot
    taken, so no element ref survives). An image without a browser stays warm without one (a warning)."""

    def start(sandbox: Sandbox) -> None:
        runtime = sandbox.runtime
        try:
            runtime.browser_snapshot(call_timeout=120)
            runtime.browser_evaluate(expression=WARM_PAGE, call_timeout=60)
            runtime.browser_snapshot(call_timeout=60)
            runtime.browser_evaluate(expression="document.title = ''; document.body.replaceChildren()")
            runtime.browser_snapshot(call_timeout=60)
        except RuntimeCallError as exc:
            if exc.code != BROWSER_ERROR:
                raise
            log.warning("warm sandbox %s has no browser to start: %s", sandbox.id, exc.message)

    return Warmup(start, lasts=float(spec.env.get("HERMETIC_BROWSER_IDLE", BROWSER_IDLE)))
