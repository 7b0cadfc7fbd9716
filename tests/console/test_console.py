"""The web console's serving and security in real Chromium: served at / by the API's own process with
a strict CSP, sign-in by token for an HttpOnly SameSite=Strict cookie that logout revokes, expired
and cross-site requests refused, and markup from sessions, tools, skills and chat shown as text."""

from __future__ import annotations

import http.server
import json
import os
import select
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import get_backend
from console_browser import Console, artifacts, chromium, new_context, served_console, shot, sign_in
from hermetic_cli import scripted_env
from playwright.sync_api import Browser, expect
from skill_kit import add
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from control_plane.api.signins import COOKIE
from control_plane.store.tokens import digest

PAYLOAD = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    get_backend("local")
    with served_console(tmp_path_factory.mktemp("console"), artifacts(tmp_path_factory)) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


def sessions(console: Console) -> int:
    return len(console.agent().store.list_sessions("alpha", limit=500))


def test_the_console_is_served_at_root_with_a_strict_policy(console: Console) -> None:
    page = httpx.get(console.url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe" not in csp
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in page.text and "http" not in page.text.replace("http-equiv", "")
    script = httpx.get(console.url + "/assets/main.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert script.headers["content-security-policy"] == csp
    assert httpx.get(console.url + "/assets/nope.js").status_code == 404
    assert httpx.get(console.url + "/sessions").status_code == 401  # the API still wants a credential


def test_sign_in_gives_an_http_only_strict_cookie_that_logout_revokes(
    console: Console, browser: Browser
) -> None:
    context = new_context(browser)
    page = context.new_page()
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.goto(console.url + "/#/sessions")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()  # no token: the sign-in form
    page.get_by_label("API token").fill("hmt_not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("not a valid API token")
    assert context.cookies() == []
    shot(page, console, "sign-in")

    page.get_by_label("API token").fill(console.token)
    page.keyboard.press("Enter")  # the form submits from the keyboard
    expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    (cookie,) = context.cookies()
    assert cookie["name"] == COOKIE and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert page.evaluate("document.cookie") == ""  # no script of the page can read it
    jar = {COOKIE: cookie["value"]}
    assert httpx.get(console.url + "/sessions", cookies=jar).status_code == 200  # the API takes it
    assert console.token not in (console.root / "console-signins.json").read_text()
    assert cookie["value"] not in (console.root / "console-signins.json").read_text()

    page.reload()  # the sign-in outlives a reload: the deep link shows the page, not the form
    expect(page.get_by_role("heading", name="Sessions")).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert context.cookies() == []
    assert httpx.get(console.url + "/sessions", cookies=jar).status_code == 401  # revoked on the server
    assert all(url.startswith(console.url) for url in requests), requests  # nothing from elsewhere
    context.close()


def test_an_expired_or_orphaned_signin_is_refused(console: Console, browser: Browser) -> None:
    signins = console.app.state.signins
    expired, _ = signins.create("alpha", digest(console.token), lifetime=0)
    orphan, _ = signins.create("alpha", digest("hmt_a-token-since-revoked"), lifetime=3600)
    for value in (expired, orphan):
        assert httpx.get(console.url + "/sessions", cookies={COOKIE: value}).status_code == 401
        context = new_context(browser)
        context.add_cookies([{"name": COOKIE, "value": value, "url": console.url}])
        page = context.new_page()
        page.goto(console.url + "/#/sessions")
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        context.close()


class _OtherSite(http.server.BaseHTTPRequestHandler):
    """A page of another origin, the same at every path."""

    def page(self) -> bytes:
        return b"<!doctype html><title>another site</title>"

    def do_GET(self) -> None:  # noqa: N802
        body = self.page()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class _Attacker(_OtherSite):
    """A page of another origin that posts to the console's API as soon as it loads: a form (which
    sends cookies) and a no-cors fetch with credentials."""

    target = ""

    def page(self) -> bytes:
        return f"""<!doctype html><body>
<form id=f method=post action="{self.target}/sessions" enctype="text/plain">
<input name='{{"title":"csrf","x":"' value='"}}'></form>
<script>
fetch("{self.target}/sessions", {{method: "POST", mode: "no-cors", credentials: "include",
  headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}}).finally(() => {{
  document.title = "fetched"; document.getElementById("f").submit(); }});
</script></body>""".encode()


@pytest.fixture
def attacker(console: Console) -> Iterator[int]:
    handler = type("Handler", (_Attacker,), {"target": console.url})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])  # another port: same site; localhost: cross-site
def test_a_cross_site_post_changes_nothing(
    console: Console, browser: Browser, attacker: int, host: str
) -> None:
    context = new_context(browser)
    page = context.new_page()
    sign_in(page, console)
    before = sessions(console)
    evil = context.new_page()
    with evil.expect_navigation(url=f"{console.url}/sessions"):
        evil.goto(f"http://{host}:{attacker}/")
    assert "title" not in evil.content() and sessions(console) == before
    context.close()

    signin = console.app.state.signins
    value, csrf = signin.create("alpha", digest(console.token), lifetime=3600)
    jar = {COOKIE: value}
    own = {"Origin": console.url, "X-CSRF-Token": csrf.csrf_token}
    cases = [({"Origin": console.url}, 401), ({**own, "Origin": f"http://{host}:{attacker}"}, 401)]
    for headers, code in [*cases, ({**own, "Origin": "null"}, 401), (own, 201)]:
        answer = httpx.post(console.url + "/sessions", json={}, cookies=jar, headers=headers)
        assert answer.status_code == code, (headers, answer.text)
    assert sessions(console) == before + 1
    login = {"token": console.token}
    refused = httpx.post(console.url + "/auth/login", json=login, headers={"Origin": f"http://{host}:1"})
    assert refused.status_code == 403  # no other site signs a browser in


def test_markup_in_titles_tool_output_skills_and_chat_is_only_text(
    console: Console, browser: Browser
) -> None:
    agent = console.agent()
    titled = agent.new_conversation(title=PAYLOAD, source="api").id
    add(agent.skills, "injected-skill", "Does things " + PAYLOAD)
    console.llm.load(
        [
            {"tool_calls": [{"name": "terminal", "arguments": {"command": f"printf '%s' '{PAYLOAD}'"}}]},
            {"text": "reply " + PAYLOAD},
        ]
    )
    page = new_context(browser).new_page()
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text))
    sign_in(page, console)
    expect(page.get_by_role("link", name=PAYLOAD)).to_be_visible()  # the title, as text
    page.goto(f"{console.url}/#/sessions/{titled}")
    page.get_by_label("Message").fill("chat " + PAYLOAD)
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".msg.assistant .text").last).to_have_text("reply " + PAYLOAD)
    expect(page.locator(".msg.user .text")).to_have_text("chat " + PAYLOAD)
    page.locator(".tool summary").click()
    expect(page.locator(".tool .output")).to_contain_text(PAYLOAD)
    page.goto(f"{console.url}/#/skills")
    expect(page.get_by_role("cell", name="Does things " + PAYLOAD)).to_be_visible()
    expect(page.get_by_role("row", name="injected-skill")).to_contain_text("never run")  # no rate yet
    page.goto(f"{console.url}/#/skills/injected-skill")
    expect(page.get_by_text("Does things " + PAYLOAD).first).to_be_visible()
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img[src=x]").count() == 0

    # and the policy is a second wall: markup that did reach the DOM still cannot run script
    page.evaluate("document.body.insertAdjacentHTML('beforeend', '<img src=x onerror=\"window.__pwned=3\">')")
    settled = "new Promise(done => { const img = document.querySelector('img[src=x]'); "
    settled += "img.complete ? done() : img.addEventListener('error', done); })"
    page.evaluate(f"() => {settled}")  # the image has failed: its handler would have run by now
    assert page.evaluate("window.__pwned") is None
    assert any("Content Security Policy" in text for text in violations)
    shot(page, console, "skill-injected")
    page.close()


def test_serve_open_opens_the_console_once_it_listens(tmp_path: Path) -> None:
    fifo = tmp_path / "opened"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    env = scripted_env(tmp_path, "http://127.0.0.1:9", BROWSER=f"sh -c 'echo %s > {fifo}'")
    with socket_port() as port:
        serve = subprocess.Popen(
            [sys.executable, "-m", "control_plane", "serve", "--open", "--port", str(port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        ready, _, _ = select.select([reader], [], [], 60)
        assert ready, serve.stderr.read() if serve.poll() is not None else "no browser opened in 60 s"
        opened = os.read(reader, 200).decode().strip()
        assert opened == f"http://127.0.0.1:{port}/"
        assert "Hermetic console" in httpx.get(opened).text
    finally:
        serve.terminate()
        serve.wait(30)
        os.close(reader)


def socket_port() -> Any:
    """A free loopback port, released for the server to bind (the kernel does not hand it out again
    at once)."""
    import contextlib
    import socket

    @contextlib.contextmanager
    def free() -> Iterator[int]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        yield port

    return free()


OPEN_SOCKET = """url => new Promise(done => {
  const socket = new WebSocket(url);
  socket.onmessage = event => { done(event.data); socket.close(); };
  socket.onclose = () => done("refused");
})"""
"""In a page: the terminal socket's first message, or 'refused' when the handshake fails."""


def _refusal(url: str, **headers: str) -> int:
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers=headers, open_timeout=30).close()
    return refused.value.response.status_code


def test_the_terminal_socket_wants_the_signin_from_this_origin(console: Console, browser: Browser) -> None:
    session_id = console.agent().new_conversation(title="socket", source="api").id
    target = console.url.replace("http:", "ws:") + f"/sessions/{session_id}/terminal"
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _OtherSite)  # same site: another port
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        context = new_context(browser)
        page = context.new_page()
        sign_in(page, console)
        assert json.loads(page.evaluate(OPEN_SOCKET, target))["type"] == "terminal"
        evil = context.new_page()  # has the cookie, but its Origin is another server's
        evil.goto(f"http://127.0.0.1:{other.server_address[1]}/")
        assert evil.evaluate(OPEN_SOCKET, target) == "refused"
        context.close()
        stranger = new_context(browser).new_page()  # this server's page, never signed in: no cookie
        stranger.goto(console.url + "/")
        assert stranger.evaluate(OPEN_SOCKET, target) == "refused"
        stranger.context.close()
    finally:
        other.shutdown()

    value, _ = console.app.state.signins.create("alpha", digest(console.token), lifetime=3600)
    cookie = f"{COOKIE}={value}"
    assert _refusal(target, Cookie=cookie) == 403  # no Origin: not a browser's page of this server
    assert _refusal(target, Cookie=cookie, Origin=f"http://127.0.0.1:{other.server_address[1]}") == 403
    assert _refusal(target, Authorization="Bearer hmt_not-a-token") == 403
    bearer = {"Authorization": f"Bearer {console.token}"}
    with connect(target.replace(session_id, "s-none"), additional_headers=bearer) as socket:
        assert json.loads(socket.recv(timeout=30)) == {"type": "error", "message": "no session s-none"}
    with connect(target, additional_headers={"Cookie": cookie, "Origin": console.url}) as socket:
        assert json.loads(socket.recv(timeout=30))["type"] == "terminal"
        socket.send('{"type": "resize", "rows": 0, "cols": 80}')  # refused, and the socket stays open
        socket.send(json.dumps({"type": "input", "data": "echo ok-$((2 + 2))\r"}))
        seen, said = b"", []
        while b"ok-4" not in seen:
            frame = socket.recv(timeout=30)
            if isinstance(frame, bytes):
                seen += frame
            else:
                said.append(json.loads(frame))
        assert [m["type"] for m in said] == ["error"] and "rows" in said[0]["message"]
        socket.send(json.dumps({"type": "input", "data": "exit 3\r"}))
        while isinstance(frame := socket.recv(timeout=30), bytes):
            pass
        assert json.loads(frame) == {"type": "exit", "exit_code": 3}
