"""browser.*: Chromium driven inside the sandbox against pages served inside it, on every backend."""

from __future__ import annotations

import base64
import json
import os
import re
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from backends import Backend, RuntimeCallError, Sandbox, SandboxError, SandboxSpec
from sandboxes import PROTOCOL_VERSION
from sandboxes.protocol import BROWSER_ERROR, INVALID_PARAMS

REPO = Path(__file__).resolve().parents[2]
BROWSER_IMAGE = "hermetic-sandbox:browser"
PAGES = {
    "index.html": """<!doctype html><html><head><title>Hermetic test page</title></head><body>
<h1>Welcome</h1>
<input id="name" aria-label="Name" value="old text">
<select id="colour" aria-label="Colour">
  <option value="red">Red</option><option value="green">Green</option><option value="blue">Blue</option>
</select>
<button id="change" onclick="this.textContent = 'Changed by click'">Change me</button>
<a href="form.html">Second page</a>
<div style="height: 3000px">tall</div>
<script>console.log("page ready"); throw new Error("deliberate failure");</script>
</body></html>""",
    "form.html": """<!doctype html><html><head><title>Form page</title></head><body>
<form action="result.html" method="get"><input name="q" aria-label="Query"><button>Search</button></form>
</body></html>""",
    "result.html": "<!doctype html><html><head><title>Result</title></head><body><p>done</p></body></html>",
}


pytestmark = pytest.mark.needs("browser")


def browser_spec(**extra: Any) -> SandboxSpec:
    return SandboxSpec(image=BROWSER_IMAGE, memory="1g", pids=512, **extra)


SERVE_ON_A_FREE_PORT = """
import http.server, os, socket, sys
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
with open(".port.tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(".port.tmp", ".port")  # whole, or not there yet
server.serve_forever()
"""


def serve_pages(sb: Sandbox) -> str:
    """Write the pages into the workspace and serve them on the sandbox's own loopback, on a port the
    kernel picks: an ssh "sandbox" shares the host's loopback, where a port picked at random could be
    taken by the suite's other servers (the server then failed to start and every page was refused)."""
    for name, html in PAGES.items():
        sb.call("fs.write", {"path": name, "content": html})
    sb.call("fs.write", {"path": ".serve.py", "content": SERVE_ON_A_FREE_PORT})
    sb.call("proc.spawn", {"command": "python3 .serve.py"})
    wait = "for i in $(seq 1 200); do [ -f .port ] && exec cat .port; sleep 0.05; done; exit 1"
    ready = sb.run(wait)
    assert ready["exit_code"] == 0, ready
    return f"http://127.0.0.1:{int(ready['output'])}"


@pytest.fixture(scope="module")
def browser_sandbox(backend: Backend) -> Iterator[Sandbox]:
    if backend.name == "docker":
        backend.ensure_image(BROWSER_IMAGE)  # type: ignore[attr-defined]
    with backend.create(browser_spec()) as sb:
        yield sb


@pytest.fixture(scope="module")
def site(browser_sandbox: Sandbox) -> str:
    return serve_pages(browser_sandbox)


def ref_of(snapshot: str, needle: str) -> str:
    """The ref on the first snapshot line containing `needle`."""
    for line in snapshot.splitlines():
        if needle in line:
            found = re.search(r"\[ref=(\w+)\]", line)
            assert found, line
            return found.group(1)
    raise AssertionError(f"{needle!r} not in snapshot:\n{snapshot}")


def open_index(sb: Sandbox, site: str, session: str = "default") -> str:
    page = sb.call("browser.navigate", {"url": f"{site}/index.html", "session": session})
    return page["snapshot"]


def value_of(sb: Sandbox, selector: str) -> Any:
    return sb.call("browser.evaluate", {"expression": f"document.querySelector('{selector}').value"})["value"]


def test_navigate_returns_title_and_a_snapshot_with_refs(browser_sandbox: Sandbox, site: str) -> None:
    page = browser_sandbox.call("browser.navigate", {"url": f"{site}/index.html"})
    assert page["title"] == "Hermetic test page" and page["status"] == 200
    assert page["url"] == f"{site}/index.html"
    for line in ('heading "Welcome"', 'textbox "Name"', 'combobox "Colour"', 'button "Change me"'):
        assert re.search(re.escape(line) + r".*\[ref=e\d+\]", page["snapshot"]), page["snapshot"]
    again = browser_sandbox.call("browser.snapshot")
    assert ref_of(again["snapshot"], "Change me") == ref_of(page["snapshot"], "Change me")


def test_type_replaces_the_text_of_an_input(browser_sandbox: Sandbox, site: str) -> None:
    ref = ref_of(open_index(browser_sandbox, site), 'textbox "Name"')
    browser_sandbox.call("browser.type", {"ref": ref, "text": "new text"})
    assert value_of(browser_sandbox, "#name") == "new text"


def test_select_chooses_an_option(browser_sandbox: Sandbox, site: str) -> None:
    ref = ref_of(open_index(browser_sandbox, site), 'combobox "Colour"')
    result = browser_sandbox.call("browser.select", {"ref": ref, "values": "blue"})
    assert result["selected"] == ["blue"]
    assert value_of(browser_sandbox, "#colour") == "blue"


def test_click_runs_the_buttons_handler(browser_sandbox: Sandbox, site: str) -> None:
    ref = ref_of(open_index(browser_sandbox, site), 'button "Change me"')
    browser_sandbox.call("browser.click", {"ref": ref})
    assert 'button "Changed by click"' in browser_sandbox.call("browser.snapshot")["snapshot"]


def test_press_enter_submits_the_form(browser_sandbox: Sandbox, site: str) -> None:
    page = browser_sandbox.call("browser.navigate", {"url": f"{site}/form.html"})
    ref = ref_of(page["snapshot"], 'textbox "Query"')
    browser_sandbox.call("browser.type", {"ref": ref, "text": "hermetic"})
    result = browser_sandbox.call("browser.press", {"key": "Enter", "ref": ref})
    assert result["url"] == f"{site}/result.html?q=hermetic" and result["title"] == "Result"


def test_type_with_submit_presses_enter(browser_sandbox: Sandbox, site: str) -> None:
    page = browser_sandbox.call("browser.navigate", {"url": f"{site}/form.html"})
    ref = ref_of(page["snapshot"], 'textbox "Query"')
    result = browser_sandbox.call("browser.type", {"ref": ref, "text": "two words", "submit": True})
    assert result["url"] == f"{site}/result.html?q=two+words"


def test_follow_a_link_then_go_back(browser_sandbox: Sandbox, site: str) -> None:
    ref = ref_of(open_index(browser_sandbox, site), 'link "Second page"')
    assert browser_sandbox.call("browser.click", {"ref": ref})["title"] == "Form page"
    back = browser_sandbox.call("browser.back")
    assert back["moved"] and back["url"] == f"{site}/index.html" and back["title"] == "Hermetic test page"


def test_scroll_moves_the_page_and_reports_where_it_is(browser_sandbox: Sandbox, site: str) -> None:
    open_index(browser_sandbox, site)
    down = browser_sandbox.call("browser.scroll", {"direction": "down", "amount": 500})
    assert down["scroll_y"] == 500 and down["page_height"] > 3000
    assert browser_sandbox.call("browser.scroll", {"direction": "up"})["scroll_y"] == 0


def test_console_reports_logs_and_page_errors_once(browser_sandbox: Sandbox, site: str) -> None:
    browser_sandbox.call("browser.console", {"clear": True})
    open_index(browser_sandbox, site)
    messages = browser_sandbox.call("browser.console")["messages"]
    assert {"type": "log", "text": "page ready", "location": f"{site}/index.html"} in messages
    assert {"type": "pageerror", "text": "Error: deliberate failure"} in messages
    assert browser_sandbox.call("browser.console")["messages"] == []


def test_evaluate_returns_json_values(browser_sandbox: Sandbox, site: str) -> None:
    open_index(browser_sandbox, site)
    assert browser_sandbox.call("browser.evaluate", {"expression": "6 * 7"})["value"] == 42
    value = browser_sandbox.call("browser.evaluate", {"expression": "({title: document.title, n: [1, 'x']})"})
    assert value["value"] == {"title": "Hermetic test page", "n": [1, "x"]}


def test_evaluate_reports_a_thrown_error(browser_sandbox: Sandbox, site: str) -> None:
    with pytest.raises(RuntimeCallError) as err:
        browser_sandbox.call("browser.evaluate", {"expression": "(() => { throw new Error('nope') })()"})
    assert err.value.code == BROWSER_ERROR and "nope" in err.value.message


def test_screenshot_is_a_png_of_the_viewport(browser_sandbox: Sandbox, site: str) -> None:
    open_index(browser_sandbox, site)
    shot = browser_sandbox.call("browser.screenshot")
    png = base64.b64decode(shot["png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    assert struct.unpack(">II", png[16:24]) == (1280, 720) == (shot["width"], shot["height"])
    full = browser_sandbox.call("browser.screenshot", {"full_page": True})
    assert full["height"] > 3000


def test_unknown_ref_is_refused_without_waiting(browser_sandbox: Sandbox, site: str) -> None:
    open_index(browser_sandbox, site)
    with pytest.raises(RuntimeCallError) as err:
        browser_sandbox.call("browser.click", {"ref": "e9999"}, timeout=5)
    assert err.value.code == INVALID_PARAMS and "snapshot" in err.value.message


def test_sessions_have_their_own_pages(browser_sandbox: Sandbox, site: str) -> None:
    open_index(browser_sandbox, site, session="first")
    browser_sandbox.call("browser.navigate", {"url": f"{site}/form.html", "session": "second"})
    assert browser_sandbox.call("browser.snapshot", {"session": "first"})["title"] == "Hermetic test page"
    assert browser_sandbox.call("browser.close", {"session": "second"}) == {"closed": True}
    assert browser_sandbox.call("browser.close", {"session": "second"}) == {"closed": False}
    browser_sandbox.call("browser.close", {"session": "first"})


KILL_OWN_CHROMIUM = """python3 - <<'EOF'
import os, signal
killed = 0
def parent(pid):
    try:
        return int(open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return 0
for pid in [int(name) for name in os.listdir("/proc") if name.isdigit()]:
    try:
        if b"chrom" not in open("/proc/%d/cmdline" % pid, "rb").read():
            continue
    except OSError:
        continue
    ancestor = pid
    while ancestor > 1 and ancestor != RUNTIME:
        ancestor = parent(ancestor)
    if ancestor == RUNTIME:
        os.kill(pid, signal.SIGKILL)
        killed += 1
print(killed)
EOF"""
"""Kills the Chromium processes under this sandbox's runtime only: on the ssh backend (the host's own
user) a plain `pkill -f chromium` killed every browser of every test running on the machine."""


def test_killed_browser_is_reported_then_replaced(browser_sandbox: Sandbox, site: str) -> None:
    open_index(browser_sandbox, site)
    runtime = browser_sandbox.call("sys.info")["pid"]
    killed = browser_sandbox.run(KILL_OWN_CHROMIUM.replace("RUNTIME", str(runtime)))["output"]
    assert int(killed.split()[-1]) >= 1, killed
    try:
        browser_sandbox.call("browser.navigate", {"url": f"{site}/form.html"})
    except RuntimeCallError as exc:
        assert exc.code == BROWSER_ERROR and "next call starts a fresh one" in exc.message
    assert browser_sandbox.call("browser.navigate", {"url": f"{site}/form.html"})["title"] == "Form page"


class _Recorder(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<title>host page</title>")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def host_server() -> Iterator[tuple[int, list[str]]]:
    """A page on the host's loopback (never any other address), recording who reached it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    hits: list[str] = []
    server.RequestHandlerClass = type("Recorder", (_Recorder,), {"hits": hits})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], hits
    server.shutdown()
    server.server_close()


@pytest.mark.needs("isolation")
def test_browser_under_network_none_cannot_reach_the_host(
    browser_sandbox: Sandbox, site: str, host_server: tuple[int, list[str]]
) -> None:
    port, hits = host_server
    with pytest.raises(RuntimeCallError) as err:
        browser_sandbox.call("browser.navigate", {"url": f"http://127.0.0.1:{port}/secret", "timeout": 10})
    assert err.value.code == BROWSER_ERROR and "net::ERR_" in err.value.message
    assert hits == []
    assert open_index(browser_sandbox, site)  # the sandbox's own loopback still works


@pytest.mark.needs("isolation")  # counts Chromium processes: needs a process table of its own
def test_idle_browser_is_closed_and_shutdown_leaves_none(backend: Backend) -> None:
    if backend.name == "docker":
        backend.ensure_image(BROWSER_IMAGE)  # type: ignore[attr-defined]
    with backend.create(browser_spec(env={"HERMETIC_BROWSER_IDLE": "1"})) as sb:
        site = serve_pages(sb)
        count = "pgrep -c chromium || true"  # by process name: /usr/bin/chromium is a wrapper script
        assert open_index(sb, site)
        assert int(sb.run(count)["output"]) > 0
        gone = sb.run(
            f'for i in $(seq 1 1200); do [ "$({count})" = 0 ] && break; sleep 0.1; done; {count}', timeout=150
        )
        assert gone["output"].strip() == "0"
        assert open_index(sb, site)  # and the next call starts a fresh browser
        sb.call("browser.evaluate", {"expression": "1"})
        started = time.time() - sb.call("sys.info")["uptime"]
        sb.call("sys.shutdown")
        deadline = time.monotonic() + 120
        while True:  # until the old runtime is gone and a new one answers
            try:
                if time.time() - sb.call("sys.info")["uptime"] > started + 0.5:
                    break
            except SandboxError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
        left = sb.run(count)["output"].strip()
        assert left == "0"


def test_runtime_without_playwright_says_which_image_has_it(tmp_path: Path) -> None:
    """Under `python3 -S` (standard library only) the runtime still runs and browser.* explains."""
    proc = subprocess.Popen(
        [sys.executable, "-S", "-m", "sandboxes"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"]},
    )
    requests = [
        {"id": 1, "method": "sys.hello", "params": {"protocol": PROTOCOL_VERSION}},
        {"id": 2, "method": "browser.navigate", "params": {"url": "about:blank"}},
    ]
    lines = "".join(json.dumps({"jsonrpc": "2.0", **r}) + "\n" for r in requests).encode()
    out, _ = proc.communicate(lines, timeout=60)
    replies = {r["id"]: r for r in map(json.loads, out.splitlines())}
    assert "result" in replies[1]
    error = replies[2]["error"]
    assert error["code"] == BROWSER_ERROR
    assert "lacks Playwright/Chromium" in error["message"] and BROWSER_IMAGE in error["message"]
