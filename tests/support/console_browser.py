"""The web console served for a test: the API app (scripted model) on a loopback port, one headless
Chromium (Debian's /usr/bin/chromium driven by Playwright), sign-in, and screenshots as artifacts
(under HERMETIC_ARTIFACTS when set, else the test session's temporary directory)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright
from served_app import serve_app

from control_plane.api.app import create_app
from control_plane.config.settings import Settings, load_settings
from control_plane.models.fake_llm import FakeLLM
from control_plane.store.tokens import TokenStore

CHROMIUM = "/usr/bin/chromium"
PAGE_TIMEOUT_MS = 60_000
"""Every wait of a test page (expect, goto, click): bounds of a loaded machine, where a first request
opens the profile and its backend. They end as soon as their condition holds."""
expect.set_options(timeout=PAGE_TIMEOUT_MS)
ARGS = ["--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update"]


@dataclass
class Console:
    url: str
    token: str
    app: Any
    llm: FakeLLM
    root: Path
    shots: Path

    def agent(self) -> Any:
        return self.app.state.hub.profile("alpha").agent


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def new_context(browser: Browser, **options: Any) -> BrowserContext:
    """A browser context whose pages wait PAGE_TIMEOUT_MS (Playwright's own default is 30 s)."""
    context = browser.new_context(**options)
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    return context


@contextlib.contextmanager
def served_console(root: Path, shots: Path, backend: str = "local", **overrides: Any) -> Iterator[Console]:
    """The app for profile alpha under `root` (the scripted model, `backend`; `overrides` as
    load_settings takes them) with one token, served on 127.0.0.1."""
    with FakeLLM() as llm:
        model = {"name": "openai/scripted", "api_base": llm.url, "api_key": "k-123456", "retries": 0}

        def settings_for(profile: str) -> Settings:
            return load_settings(profile, root=root, model=model, backend=backend, **overrides)

        app = create_app(root, settings_for)
        token = TokenStore(root).create("alpha", "console test")
        with serve_app(app) as url:
            yield Console(url, token, app, llm, root, shots)
        app.state.hub.close()


def artifacts(factory: pytest.TempPathFactory) -> Path:
    base = os.environ.get("HERMETIC_ARTIFACTS")
    shots = (Path(base) if base else factory.getbasetemp()) / "console-screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    return shots


def sign_in(page: Page, console: Console, path: str = "/") -> None:
    page.goto(console.url + path)
    page.get_by_label("API token").fill(console.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()


def shot(page: Page, console: Console, name: str) -> Path:
    path = console.shots / f"{name}.png"
    page.screenshot(path=path, full_page=True)
    return path


@pytest.fixture(scope="module", params=["local", "docker"])
def console(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    get_backend(request.param)  # skips, saying why, where the backend cannot run
    settings = {
        "sandbox": {"network": "allowlist"},
        "toolsets": ["terminal", "network"],
        "skill_install": {"allow_private_urls": True},  # the skill test's archive is on loopback
        "gateway": {"webhook": {"secret": "console-test-secret", "port": 0}},  # the status page's platform
        "memory": {"providers": ["semantic"]},  # the memory page's provider
    }
    root = tmp_path_factory.mktemp(f"console-{request.param}")
    with served_console(root, artifacts(tmp_path_factory), backend=request.param, **settings) as served:
        yield served


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(console: Console, browser: Browser) -> Iterator[Page]:
    context = new_context(browser, viewport={"width": 1280, "height": 720})
    page = context.new_page()
    sign_in(page, console)
    yield page
    context.close()


def backend_of(console: Console) -> str:
    return str(console.agent().settings.backend)
