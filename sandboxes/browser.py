"""browser.* methods: Playwright's sync API driving Chromium, one dedicated thread per browser session.

Playwright is imported lazily, on a session's thread, so the runtime still runs with the standard
library alone; without Playwright or Chromium every browser.* call answers BROWSER_ERROR.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import struct
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable

from .protocol import BROWSER_ERROR, INVALID_PARAMS, RpcError

log = logging.getLogger("hermetic.runtime.browser")

CHROMIUM = "/usr/bin/chromium"
# Chromium's own sandbox cannot start under Docker's default seccomp profile, so Playwright's default
# --no-sandbox stays: the container (or bubblewrap) is the sandbox.
CHROMIUM_ARGS = [
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-gpu",
    "--disable-quic",
]


def _proxy() -> dict[str, str] | None:
    """The sandbox's egress proxy for Chromium (network: allowlist), which ignores the environment."""
    server = os.environ.get("HTTPS_PROXY")
    return {"server": server, "bypass": "localhost,127.0.0.1"} if server else None


MISSING = (
    "this sandbox's image lacks Playwright/Chromium (%s); use the browser image variant "
    "hermetic-sandbox:browser (SandboxSpec(image='hermetic-sandbox:browser', memory='1g', pids=512))"
)
SNAPSHOT_LIMIT = 40_000  # characters of ARIA snapshot a reply carries
SCREENSHOT_LIMIT = 4 << 20  # bytes of PNG a reply carries
SCREENSHOT_MAX_HEIGHT = 8_000  # px of a full-page shot: a 20,000 px page needs over 1 GiB
CONSOLE_KEEP = 500  # messages kept between two console calls; older ones are counted as dropped
EVALUATE_LIMIT = 100_000  # characters of JSON an evaluate reply carries
SLACK = 30.0  # seconds a request waits beyond its own timeout before it calls the browser hung
_REF = re.compile(r"^(?:f\d+)?e\d+$")
_SNAPSHOT_REF = re.compile(r"\[ref=((?:f\d+)?e\d+)\]")
_SCROLL = {"down": (0, 1), "up": (0, -1), "right": (1, 0), "left": (-1, 0)}


def _load_playwright() -> Any:
    """Playwright's sync API module, or BROWSER_ERROR saying which image has it."""
    try:
        from playwright import sync_api
    except ImportError as exc:
        raise RpcError(BROWSER_ERROR, MISSING % ("no Playwright: %s" % exc,)) from exc
    return sync_api


class BrowserSession:
    """One Chromium and its page. Every Playwright call runs on the session's own thread."""

    def __init__(self, name: str, executable: str) -> None:
        self.name = name
        self.executable = executable
        self.pending = 0  # requests in flight; guarded by the manager's lock
        self.timer: threading.Timer | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="browser-%s" % name)
        # Touched only on the session's thread:
        self._api: Any = None
        self._pw: Any = None
        self._browser: Any = None
        self._page: Any = None
        self._crashed = False
        self._console: deque[dict[str, Any]] = deque(maxlen=CONSOLE_KEEP)
        self._dropped = 0
        self._refs: set[str] = set()

    def run(self, op: Callable[..., Any], args: tuple[Any, ...], wait: float) -> Any:
        """Run `op(self, *args)` on the session's thread; wait at most `wait` seconds."""
        future = self._executor.submit(self._guarded, op, args)
        try:
            return future.result(timeout=wait)
        except FutureTimeout:
            raise RpcError(
                BROWSER_ERROR, "the browser did not answer within %.0f s; close the session" % wait
            ) from None

    def close(self, wait: float = 10.0) -> None:
        """Close the browser (on its thread) and let the thread end."""
        future = self._executor.submit(self._teardown)
        self._executor.shutdown(wait=False)
        try:
            future.result(timeout=wait)
        except FutureTimeout:
            log.warning("browser session %s did not close within %.0f s", self.name, wait)

    # -- on the session's thread -----------------------------------------------------------

    def _guarded(self, op: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        self._start()
        try:
            return op(self, *args)
        except self._api.Error as exc:
            if self._crashed or not self._browser.is_connected() or self._page.is_closed():
                self._teardown()
                raise RpcError(
                    BROWSER_ERROR,
                    "the browser crashed or was closed (%s); the next call starts a fresh one"
                    % _first_line(exc),
                    {"kind": "crashed"},
                ) from None
            kind = "timeout" if isinstance(exc, self._api.TimeoutError) else "page"
            raise RpcError(BROWSER_ERROR, _first_line(exc), {"kind": kind}) from None

    def _start(self) -> None:
        if self._page is not None:
            return
        if self._api is None:
            self._api = _load_playwright()
        if not os.access(self.executable, os.X_OK):
            raise RpcError(BROWSER_ERROR, MISSING % ("no Chromium at %s" % self.executable,))
        self._crashed = False
        self._refs = set()
        try:
            self._pw = self._api.sync_playwright().start()
            self._browser = self._pw.chromium.launch(
                executable_path=self.executable, headless=True, args=CHROMIUM_ARGS, proxy=_proxy()
            )
            page = self._browser.new_page()
        except Exception as exc:
            self._teardown()
            raise RpcError(BROWSER_ERROR, "the browser did not start: %s" % _first_line(exc)) from None
        page.set_default_timeout(10_000)
        page.on("console", self._on_console)
        page.on("pageerror", self._on_page_error)
        page.on("crash", lambda _page: setattr(self, "_crashed", True))
        self._page = page

    def _teardown(self) -> None:
        page, browser, pw = self._page, self._browser, self._pw
        self._page = self._browser = self._pw = None
        self._refs = set()
        for step in (browser and browser.close, pw and pw.stop):
            if step:
                try:
                    step()
                except Exception as exc:  # already dead: nothing left to close
                    log.debug("browser %s teardown: %s", self.name, exc)
        del page

    def _on_console(self, message: Any) -> None:
        self._keep({"type": message.type, "text": message.text, "location": message.location.get("url")})

    def _on_page_error(self, error: Any) -> None:
        self._keep({"type": "pageerror", "text": "%s: %s" % (error.name, error.message)})

    def _keep(self, entry: dict[str, Any]) -> None:
        if len(self._console) == self._console.maxlen:
            self._dropped += 1
        self._console.append(entry)

    def _locate(self, ref: str) -> Any:
        if not isinstance(ref, str) or not _REF.match(ref):
            raise RpcError(INVALID_PARAMS, "ref must look like e12, as printed by browser.snapshot")
        if ref not in self._refs:
            raise RpcError(
                INVALID_PARAMS, "unknown ref %r: refs come from the latest browser.snapshot; take one" % ref
            )
        return self._page.locator("aria-ref=%s" % ref)

    def _settle(self, timeout_ms: float) -> dict[str, Any]:
        """After an action: wait for a navigation it started to load; say where the page is."""
        with contextlib.suppress(self._api.TimeoutError):
            self._page.wait_for_load_state("load", timeout=timeout_ms)
        return {"url": self._page.url, "title": self._page.title()}

    # -- operations (run via `run`) ---------------------------------------------------------

    def op_navigate(self, url: str, timeout_ms: float) -> dict[str, Any]:
        try:
            response = self._page.goto(url, wait_until="load", timeout=timeout_ms)
        except self._api.Error as exc:
            # After a network error Chromium goes on to show its error page; let that land, or the
            # next goto is "interrupted by another navigation to chrome-error://chromewebdata/".
            if "net::ERR_" in str(exc) and "net::ERR_ABORTED" not in str(exc):
                with contextlib.suppress(self._api.Error):
                    self._page.wait_for_url("chrome-error://**", wait_until="load", timeout=5_000)
            raise
        result = self._settle(timeout_ms)
        result["status"] = response.status if response is not None else None
        result.update(self.op_snapshot())
        return result

    def op_snapshot(self) -> dict[str, Any]:
        text = self._page.aria_snapshot(mode="ai")
        self._refs = set(_SNAPSHOT_REF.findall(text))
        truncated = len(text) > SNAPSHOT_LIMIT
        if truncated:
            cut = text.rfind("\n", 0, SNAPSHOT_LIMIT)
            text = text[: cut if cut > 0 else SNAPSHOT_LIMIT] + "\n[... snapshot truncated: %s chars ...]" % (
                format(len(text), ",")
            )
        return {"url": self._page.url, "title": self._page.title(), "snapshot": text, "truncated": truncated}

    def op_click(self, ref: str, timeout_ms: float) -> dict[str, Any]:
        self._locate(ref).click(timeout=timeout_ms)
        return self._settle(timeout_ms)

    def op_type(self, ref: str, text: str, submit: bool, timeout_ms: float) -> dict[str, Any]:
        target = self._locate(ref)
        target.fill(text, timeout=timeout_ms)  # fill clears what was there
        if submit:
            target.press("Enter", timeout=timeout_ms)
        return self._settle(timeout_ms)

    def op_press(self, key: str, ref: str | None, timeout_ms: float) -> dict[str, Any]:
        if ref is None:
            self._page.keyboard.press(key)
        else:
            self._locate(ref).press(key, timeout=timeout_ms)
        return self._settle(timeout_ms)

    def op_select(self, ref: str, values: list[str], timeout_ms: float) -> dict[str, Any]:
        chosen = self._locate(ref).select_option(values, timeout=timeout_ms)
        result = self._settle(timeout_ms)
        result["selected"] = chosen
        return result

    def op_scroll(self, direction: str, amount: int | None, ref: str | None) -> dict[str, Any]:
        if ref is not None:
            self._locate(ref).scroll_into_view_if_needed()
        else:
            if direction not in _SCROLL:
                raise RpcError(INVALID_PARAMS, "direction must be one of %s" % ", ".join(_SCROLL))
            dx, dy = _SCROLL[direction]
            step = (
                "%d" % amount
                if amount is not None
                else "(%s) * 0.8" % ("innerHeight" if dy else "innerWidth")
            )
            self._page.evaluate("window.scrollBy(%d * %s, %d * %s)" % (dx, step, dy, step))
        x, y, height, width = self._page.evaluate(
            "[scrollX, scrollY, document.documentElement.scrollHeight, document.documentElement.scrollWidth]"
        )
        return {"scroll_x": x, "scroll_y": y, "page_height": height, "page_width": width}

    def op_back(self, timeout_ms: float) -> dict[str, Any]:
        response = self._page.go_back(wait_until="load", timeout=timeout_ms)
        result = self._settle(timeout_ms)
        result["moved"] = response is not None
        return result

    def op_screenshot(self, full_page: bool) -> dict[str, Any]:
        clip = None
        clipped = False
        if full_page:
            width, height = self._page.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]"
            )
            if height > SCREENSHOT_MAX_HEIGHT:
                clip, clipped = {"x": 0, "y": 0, "width": width, "height": SCREENSHOT_MAX_HEIGHT}, True
        png = self._page.screenshot(type="png", full_page=full_page, clip=clip)
        if len(png) > SCREENSHOT_LIMIT and full_page:
            png, clipped = self._page.screenshot(type="png"), True  # the viewport alone
        if len(png) > SCREENSHOT_LIMIT:
            too_big = "screenshot is %d bytes, over the %d-byte cap" % (len(png), SCREENSHOT_LIMIT)
            raise RpcError(BROWSER_ERROR, too_big)
        width, height = struct.unpack(">II", png[16:24])
        return {
            "png": base64.b64encode(png).decode("ascii"),
            "width": width,
            "height": height,
            "bytes": len(png),
            "clipped": clipped,
        }

    def op_console(self, clear: bool) -> dict[str, Any]:
        self._page.title()  # a round trip, so events the driver already sent are delivered
        messages, dropped = list(self._console), self._dropped
        if clear:
            self._console.clear()
            self._dropped = 0
        return {"messages": messages, "dropped": dropped}

    def op_evaluate(self, expression: str) -> dict[str, Any]:
        value = self._page.evaluate(expression)
        try:
            text = json.dumps(value)
        except (TypeError, ValueError):
            value, text = repr(value), repr(value)
        if len(text) > EVALUATE_LIMIT:
            return {"value": text[:EVALUATE_LIMIT], "truncated": True}
        return {"value": value, "truncated": False}


class BrowserManager:
    """Browser sessions by name: each started on first use and closed after `idle` seconds unused."""

    def __init__(self, idle: float = 300.0, executable: str = CHROMIUM) -> None:
        self.idle = idle
        self.executable = executable
        self._sessions: dict[str, BrowserSession] = {}
        self._lock = threading.Lock()

    def methods(self) -> dict[str, Callable[..., Any]]:
        return {
            "browser.navigate": self.navigate,
            "browser.snapshot": self.snapshot,
            "browser.click": self.click,
            "browser.type": self.type,
            "browser.press": self.press,
            "browser.select": self.select,
            "browser.scroll": self.scroll,
            "browser.back": self.back,
            "browser.screenshot": self.screenshot,
            "browser.console": self.console,
            "browser.evaluate": self.evaluate,
            "browser.close": self.close,
        }

    def _run(self, session: str, op: Callable[..., Any], *args: Any, timeout: float = 30.0) -> Any:
        with self._lock:
            browser = self._sessions.get(session)
            if browser is None:
                browser = self._sessions[session] = BrowserSession(session, self.executable)
            browser.pending += 1
            if browser.timer is not None:
                browser.timer.cancel()
                browser.timer = None
        try:
            return browser.run(op, args, timeout + SLACK)
        finally:
            with self._lock:
                browser.pending -= 1
                if browser.pending == 0 and self._sessions.get(session) is browser:
                    browser.timer = threading.Timer(self.idle, self._expire, (browser,))
                    browser.timer.daemon = True
                    browser.timer.start()

    def _expire(self, browser: BrowserSession) -> None:
        with self._lock:
            if browser.pending or self._sessions.get(browser.name) is not browser:
                return
            del self._sessions[browser.name]
        log.info("browser session %s idle for %.0f s: closing it", browser.name, self.idle)
        browser.close()

    def close_all(self) -> None:
        with self._lock:
            browsers = list(self._sessions.values())
            self._sessions.clear()
        for browser in browsers:
            if browser.timer is not None:
                browser.timer.cancel()
            browser.close(wait=5.0)

    # -- handlers: (req, **params) ---------------------------------------------------------

    def navigate(self, req: Any, url: str, session: str = "default", timeout: float = 30.0) -> Any:
        if not isinstance(url, str) or not url:
            raise RpcError(INVALID_PARAMS, "url must be a non-empty string")
        return self._run(session, BrowserSession.op_navigate, url, _ms(timeout), timeout=float(timeout))

    def snapshot(self, req: Any, session: str = "default") -> Any:
        return self._run(session, BrowserSession.op_snapshot)

    def click(self, req: Any, ref: str, session: str = "default", timeout: float = 10.0) -> Any:
        return self._run(session, BrowserSession.op_click, ref, _ms(timeout), timeout=float(timeout))

    def type(
        self,
        req: Any,
        ref: str,
        text: str,
        submit: bool = False,
        session: str = "default",
        timeout: float = 10.0,
    ) -> Any:
        if not isinstance(text, str):
            raise RpcError(INVALID_PARAMS, "text must be a string")
        args = (ref, text, bool(submit), _ms(timeout))
        return self._run(session, BrowserSession.op_type, *args, timeout=float(timeout))

    def press(
        self, req: Any, key: str, ref: str | None = None, session: str = "default", timeout: float = 10.0
    ) -> Any:
        return self._run(session, BrowserSession.op_press, key, ref, _ms(timeout), timeout=float(timeout))

    def select(self, req: Any, ref: str, values: Any, session: str = "default", timeout: float = 10.0) -> Any:
        values = [values] if isinstance(values, str) else values
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise RpcError(INVALID_PARAMS, "values must be a string or a list of strings")
        return self._run(session, BrowserSession.op_select, ref, values, _ms(timeout), timeout=float(timeout))

    def scroll(
        self,
        req: Any,
        direction: str = "down",
        amount: int | None = None,
        ref: str | None = None,
        session: str = "default",
    ) -> Any:
        return self._run(session, BrowserSession.op_scroll, direction, amount, ref)

    def back(self, req: Any, session: str = "default", timeout: float = 30.0) -> Any:
        return self._run(session, BrowserSession.op_back, _ms(timeout), timeout=float(timeout))

    def screenshot(self, req: Any, full_page: bool = False, session: str = "default") -> Any:
        return self._run(session, BrowserSession.op_screenshot, bool(full_page))

    def console(self, req: Any, clear: bool = True, session: str = "default") -> Any:
        if session not in self._sessions:
            return {"messages": [], "dropped": 0}
        return self._run(session, BrowserSession.op_console, bool(clear))

    def evaluate(self, req: Any, expression: str, session: str = "default") -> Any:
        if not isinstance(expression, str):
            raise RpcError(INVALID_PARAMS, "expression must be a string")
        return self._run(session, BrowserSession.op_evaluate, expression)

    def close(self, req: Any, session: str = "default") -> dict[str, Any]:
        with self._lock:
            browser = self._sessions.pop(session, None)
        if browser is None:
            return {"closed": False}
        if browser.timer is not None:
            browser.timer.cancel()
        browser.close()
        return {"closed": True}


def _ms(seconds: Any) -> float:
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        raise RpcError(INVALID_PARAMS, "timeout must be a number of seconds") from None
    if value <= 0:
        raise RpcError(INVALID_PARAMS, "timeout must be positive")
    return value * 1000


def _first_line(exc: BaseException) -> str:
    """Playwright's messages carry a call log after the first lines; the model needs the gist."""
    text = str(exc).strip()
    return text.split("\nCall log:")[0].strip()[:2000]
