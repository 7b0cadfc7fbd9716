"""`python -m bench.console`: the web console in headless Chromium against a served API (the scripted
model, the local backend). Prints figures, asserts nothing:

- first render of the sessions page with 10,000 sessions in the store: from navigation to the first
  row on screen (median and p90 of several loads; target <= 500 ms on loopback);
- a stream of tool events at 200 events/s (tool_start + tool_end pairs published on a live session
  while the page follows it): events sent, calls rendered, drops, and the lag of the last one;
- keystroke echo in the sandbox terminal page: from the key's keydown in the page to its echo on the
  terminal's screen (xterm.js, the WebSocket, the runtime's PTY and back), median and p90 (target
  <= 30 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn
from playwright.sync_api import Page, sync_playwright
from websockets.sync.client import connect

from control_plane.api.app import create_app
from control_plane.config.settings import load_settings
from control_plane.events import ToolEnd, ToolStart
from control_plane.models.fake_llm import FakeLLM
from control_plane.store.tokens import TokenStore

PROFILE = "bench"
CHROMIUM = "/usr/bin/chromium"
WAIT = "while [ ! -e go ]; do sleep 0.05; done"
"""The command the streaming session's turn runs, so the page follows a live turn until it is told."""


class Served:
    """The app on 127.0.0.1 in a thread whose event loop the benchmark can publish events on."""

    def __init__(self, app: Any) -> None:
        self.app = app
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        async def run() -> None:
            serving = asyncio.create_task(self.server.serve(sockets=[sock]))
            while not self.server.started:
                await asyncio.sleep(0.01)
            started.set()
            await serving

        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(run(),), daemon=True)
        self.thread.start()
        started.wait(60)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def sign_in(page: Page, url: str, token: str) -> None:
    page.goto(url + "/")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("button", name="Sign out").wait_for()


def first_render(page: Page, url: str, loads: int) -> list[float]:
    """Milliseconds from navigation start to the first session row, as the page's clock has it (an
    upper bound: it includes the moment Playwright takes to see the row)."""
    samples: list[float] = []
    for _ in range(loads):
        page.goto(f"{url}/?load={len(samples)}#/sessions", wait_until="commit")  # a new document each time
        page.locator("table.list tbody tr").first.wait_for()  # the policy forbids wait_for_function's eval
        samples.append(page.evaluate("performance.now()"))
    return samples


def stream(served: Served, page: Page, llm: FakeLLM, rate: int, seconds: float) -> dict[str, float]:
    """Publish `rate` tool events a second for `seconds` on a session the page follows."""
    profile = served.app.state.hub.profile(PROFILE)
    llm.load([{"tool_calls": [{"name": "terminal", "arguments": {"command": WAIT}}]}, {"text": "done"}])
    page.get_by_role("button", name="New chat").click()
    page.get_by_label("Message").fill("wait")
    page.get_by_role("button", name="Send").click()
    page.locator("details.tool .state", has_text="running").wait_for()
    session_id = page.url.rsplit("/", 1)[1]
    live = profile.live[session_id]
    pairs = int(rate * seconds) // 2
    start = time.perf_counter()
    for n in range(pairs):
        call = f"bench-{n}"
        for event in (
            ToolStart(call_id=call, name="bench", arguments={"n": n}),
            ToolEnd(call_id=call, name="bench", ok=True, result=f"result {n}", duration_ms=1.0),
        ):
            served.loop.call_soon_threadsafe(live.publish, event)
        time.sleep(max(0.0, start + (n + 1) * 2 / rate - time.perf_counter()))
    sent_at = time.perf_counter()
    last = page.locator("details.tool", has_text=f'bench {{"n":{pairs - 1}}}')
    last.locator(".state", has_text="ok").wait_for(timeout=60_000)
    lag = time.perf_counter() - sent_at
    rendered = 2 * page.locator("details.tool .state", has_text="ok").count()  # a start and an end each
    profile.agent.sandboxes.peek(session_id).call("fs.write", {"path": "go", "content": ""})
    return {"sent": pairs * 2, "rendered": rendered, "dropped": pairs * 2 - rendered, "lag_ms": lag * 1000}


ECHO_PROBE = """() => {
  const rows = document.querySelector(".xterm-rows");
  window.echoes = [];
  let pressed = 0;
  document.addEventListener("keydown", () => { pressed = performance.now(); }, true);
  new MutationObserver(() => {
    if (pressed && rows.textContent.includes(window.wanted)) {
      window.echoes.push(performance.now() - pressed);
      pressed = 0;
    }
  }).observe(rows, { childList: true, subtree: true, characterData: true });
}"""
"""In the page: each key's time from keydown to the first screen update that shows it."""


def keystroke_echo(served: Served, page: Page, keys: int) -> list[float]:
    """Type `keys` letters at the sandbox shell's prompt, one at a time, each once the last is shown."""
    session_id = served.app.state.hub.profile(PROFILE).agent.new_conversation(title="echo", source="api").id
    page.goto(f"{served.url}/#/sessions/{session_id}/terminal")
    page.get_by_role("status").filter(has_text="opened").wait_for()
    page.locator(".xterm-rows", has_text="$").wait_for()
    page.evaluate(ECHO_PROBE)
    typed = "echo "
    page.keyboard.type(typed)
    page.locator(".xterm-rows", has_text=typed.strip()).wait_for()
    for n in range(keys):
        typed += "abcdefghijklmnopqrstuvwxyz"[n % 26]
        page.evaluate("wanted => { window.wanted = wanted; }", typed)
        page.keyboard.press(typed[-1])
        page.locator(".xterm-rows", has_text=typed).wait_for()
    page.keyboard.press("Enter")
    return sorted(page.evaluate("window.echoes"))


def socket_echo(served: Served, token: str, keys: int) -> list[float]:
    """The same without the browser: a key sent on the terminal's WebSocket until its echo comes back."""
    session_id = served.app.state.hub.profile(PROFILE).agent.new_conversation(title="echo", source="api").id
    url = served.url.replace("http:", "ws:") + f"/sessions/{session_id}/terminal"
    samples: list[float] = []
    with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        seen = b""
        while b"$ " not in seen:  # the prompt
            seen += _bytes(ws.recv(timeout=30))
        for n in range(keys):
            key = "abcdefghijklmnopqrstuvwxyz"[n % 26]
            start = time.perf_counter()
            ws.send(json.dumps({"type": "input", "data": key}))
            while key.encode() not in _bytes(ws.recv(timeout=30)):
                pass
            samples.append((time.perf_counter() - start) * 1000)
    return sorted(samples)


def _bytes(frame: str | bytes) -> bytes:
    return frame if isinstance(frame, bytes) else b""  # text frames are the socket's own messages


def spread(samples: list[float]) -> str:
    p90 = samples[int(0.9 * (len(samples) - 1))]
    return f"median {statistics.median(samples):.1f} ms, p90 {p90:.1f} ms over {len(samples)} keys"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=10, help="loads of the sessions page")
    parser.add_argument("--rate", type=int, default=200, help="tool events per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--keys", type=int, default=60, help="keystrokes typed in the terminal")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeLLM() as llm:
        root = Path(tmp)
        model = {"name": "openai/scripted", "api_base": llm.url, "api_key": "bench-key", "retries": 0}
        overrides = {"root": root, "backend": "local", "model": model, "learning": {"enabled": False}}
        app = create_app(root, lambda name: load_settings(name, **overrides))
        store = app.state.hub.profile(PROFILE).agent.store
        for n in range(args.sessions):
            store.create_session(PROFILE, title=f"bench session {n}", source="api")
        token = TokenStore(root).create(PROFILE)
        served = Served(app)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--disable-gpu"])
                page = browser.new_page(viewport={"width": 1280, "height": 720})
                sign_in(page, served.url, token)
                samples = first_render(page, served.url, args.loads)
                samples.sort()
                p90 = samples[int(0.9 * (len(samples) - 1))]
                print(
                    f"sessions page, first row with {args.sessions:,} sessions: median "
                    f"{statistics.median(samples):.0f} ms, p90 {p90:.0f} ms (target <= 500 ms)"
                )
                figures = stream(served, page, llm, args.rate, args.seconds)
                print(
                    f"tool events at {args.rate}/s for {args.seconds:g} s: sent {figures['sent']:.0f}, "
                    f"rendered {figures['rendered']:.0f}, dropped {figures['dropped']:.0f}, "
                    f"last rendered {figures['lag_ms']:.0f} ms after it was sent"
                )
                echoes = keystroke_echo(served, page, args.keys)
                print(f"terminal keystroke echo, keydown to screen: {spread(echoes)} (target <= 30 ms)")
                sockets = socket_echo(served, token, args.keys)
                print(f"  of which the WebSocket to the PTY and back: {spread(sockets)}")
                browser.close()
        finally:
            served.stop()
            app.state.hub.close()


if __name__ == "__main__":
    main()
