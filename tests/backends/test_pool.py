"""The warm pool against the real docker and local backends, and the sandbox manager on top of it."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend
from fastapi.testclient import TestClient

from backends import Backend, BackendUnavailable, Sandbox, SandboxGone, SandboxSpec
from backends.docker import DockerBackend, DockerSandbox
from backends.local import LocalSandbox
from backends.pool import WarmPool
from control_plane.api.app import create_app
from control_plane.config.settings import Limits, load_settings
from control_plane.sandbox_manager import SandboxManager, base_spec, warmup
from control_plane.tools.browser import NavigateArgs, browser_navigate
from control_plane.tools.registry import ToolContext, ToolResult

WAIT = 120.0  # generous bound on waits for the pool's background work; never asserted as a duration


@pytest.fixture(params=["docker", "local"], scope="module")
def backend(request: pytest.FixtureRequest) -> Backend:
    return get_backend(request.param)


@pytest.fixture
def spec() -> SandboxSpec:
    """A spec of this test's own (the label), so containers can be counted by it."""
    return SandboxSpec(memory="256m", pids=128, labels={"org.hermetic.test": uuid.uuid4().hex})


@pytest.fixture
def pool(backend: Backend) -> Iterator[WarmPool]:
    warm = WarmPool(backend, size=1, idle_seconds=600)
    yield warm
    warm.close()


def warm_sandboxes(pool: WarmPool, spec: SandboxSpec) -> list[Sandbox]:
    """The warm sandboxes the pool holds for `spec` now (to kill them or watch them go)."""
    with pool._cond:
        return [sandbox for sandbox, _ in pool._slots[spec.model_dump_json()].ready]


def containers(backend: Backend, spec: SandboxSpec) -> list[str]:
    """Names of the containers carrying the spec's test label (docker)."""
    assert isinstance(backend, DockerBackend)
    label = f"org.hermetic.test={spec.labels['org.hermetic.test']}"
    return [c.name for c in backend.client.containers.list(all=True, filters={"label": label})]


def wait_destroyed(sandbox: Sandbox, since: float) -> None:
    """Block until the sandbox's substrate is gone: docker's destroy event, the local runtime's exit."""
    if isinstance(sandbox, DockerSandbox):
        events = sandbox._client.events(
            since=int(since), until=int(time.time() + WAIT), decode=True, filters={"event": "destroy"}
        )
        assert any(event.get("Actor", {}).get("Attributes", {}).get("name") == sandbox.id for event in events)
    else:
        assert isinstance(sandbox, LocalSandbox) and sandbox._proc is not None
        sandbox._proc.wait(WAIT)


def test_acquire_hands_out_opened_sandboxes_once_and_refills(pool: WarmPool, spec: SandboxSpec) -> None:
    pool.prefill(spec)
    assert pool.wait_ready(spec, WAIT)
    warm = warm_sandboxes(pool, spec)[0]
    first = pool.acquire(spec)
    assert first is warm and first.responsive()
    assert first.run("echo $((6*7))")["output"] == "42\n"
    assert pool.wait_ready(spec, WAIT)  # refilled in the background
    second = pool.acquire(spec)
    assert second.id != first.id and second.run("pwd")["output"] == "/workspace\n"
    first.close()
    second.close()


def test_concurrent_acquires_never_share_a_sandbox(backend: Backend, spec: SandboxSpec) -> None:
    pool = WarmPool(backend, size=2, idle_seconds=600)
    got: list[Sandbox] = []
    try:
        pool.prefill(spec)
        assert pool.wait_ready(spec, WAIT)
        threads = [threading.Thread(target=lambda: got.append(pool.acquire(spec))) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len({sandbox.id for sandbox in got}) == 4
    finally:
        for sandbox in got:
            sandbox.close()
        pool.close()


def test_a_warm_sandbox_killed_behind_the_pools_back_is_not_handed_out(
    backend: Backend, pool: WarmPool, spec: SandboxSpec
) -> None:
    pool.prefill(spec)
    assert pool.wait_ready(spec, WAIT)
    dead = warm_sandboxes(pool, spec)[0]
    if isinstance(dead, DockerSandbox):
        dead.container.remove(force=True)
    else:
        assert isinstance(dead, LocalSandbox) and dead._proc is not None
        dead._proc.kill()
        dead._proc.wait()
    with pool.acquire(spec) as sandbox:
        assert sandbox.id != dead.id
        assert sandbox.run("echo ok")["output"] == "ok\n"
        assert sandbox.pop_notices() == []  # a fresh sandbox, not the dead one recovered
    if isinstance(backend, DockerBackend):
        assert dead.id not in containers(backend, spec)


def test_idle_reaper_closes_unused_warm_sandboxes_and_demand_revives_the_spec(
    backend: Backend, spec: SandboxSpec
) -> None:
    pool = WarmPool(backend, size=1, idle_seconds=2.0)  # wait_ready sees a warm one before it retires
    try:
        since = time.time() - 1
        pool.prefill(spec)
        assert pool.wait_ready(spec, WAIT)
        warm = warm_sandboxes(pool, spec)[0]
        wait_destroyed(warm, since)
        assert pool.warm_count(spec) == 0  # nobody asked within idle_seconds: no refill
        with pool.acquire(spec) as sandbox:  # asking again warms the spec again
            assert sandbox.id != warm.id and sandbox.run("true")["exit_code"] == 0
        assert pool.wait_ready(spec, WAIT)
    finally:
        pool.close()
    if isinstance(warm, LocalSandbox):
        assert not warm.dir.exists()


def test_a_warm_sandbox_is_replaced_after_a_tenth_of_its_ttl(backend: Backend) -> None:
    spec = SandboxSpec(ttl=20, labels={"org.hermetic.test": uuid.uuid4().hex})
    pool = WarmPool(backend, size=1, idle_seconds=600)
    try:
        since = time.time() - 1
        pool.prefill(spec)
        assert pool.wait_ready(spec, WAIT)
        old = warm_sandboxes(pool, spec)[0]
        wait_destroyed(old, since)  # retired at 2 s of its 20 s ttl
        assert pool.wait_ready(spec, WAIT)  # and replaced: the spec was asked for recently
        with pool.acquire(spec) as sandbox:
            assert sandbox.id != old.id and sandbox.expires_at is not None
            assert sandbox.run("true")["exit_code"] == 0
    finally:
        pool.close()


def test_close_leaves_no_warm_sandbox_even_with_a_refill_in_flight(
    backend: Backend, spec: SandboxSpec
) -> None:
    pool = WarmPool(backend, size=2, idle_seconds=600)
    pool.prefill(spec)
    assert pool.wait_ready(spec, WAIT)
    warm = warm_sandboxes(pool, spec)
    handed_out = pool.acquire(spec)  # starts a refill, which close() finds in flight
    pool.close()
    assert handed_out.run("echo mine")["output"] == "mine\n"  # handed out: the caller's, not the pool's
    handed_out.close()
    assert pool.warm_count(spec) == 0 and not pool.wait_ready(spec, 0)
    if isinstance(backend, DockerBackend):
        assert containers(backend, spec) == []
    else:
        assert all(isinstance(sb, LocalSandbox) and not sb.dir.exists() for sb in warm)
    with pool.acquire(spec) as late:  # a closed pool still serves, by creating
        assert late.run("true")["exit_code"] == 0


def test_a_failing_refill_gives_the_backends_error_and_the_pool_recovers(spec: SandboxSpec) -> None:
    backend = get_backend("docker")
    assert isinstance(backend, DockerBackend)
    missing = f"hermetic-pool-test:{uuid.uuid4().hex[:12]}"
    bad = spec.model_copy(update={"image": missing})
    pool = WarmPool(backend, size=1, idle_seconds=600)
    try:
        pool.prefill(bad)
        with pytest.raises(BackendUnavailable, match=f"image {missing} is not present"):
            pool.acquire(bad)
        with pool.acquire(spec) as sandbox:  # other specs are served as ever
            assert sandbox.run("true")["exit_code"] == 0
        assert pool.wait_ready(spec, WAIT)
        assert pool.warm_count(bad) == 0
        backend.client.images.get(spec.image).tag(missing)  # the cause goes away
        with pool.acquire(bad) as sandbox:
            assert sandbox.run("true")["exit_code"] == 0
        assert pool.wait_ready(bad, WAIT)  # the refill retried at once, not after its backoff
        with pool.acquire(bad) as sandbox:
            assert sandbox.run("echo warm")["output"] == "warm\n"
    finally:
        pool.close()
        backend.client.images.remove(missing)


def test_warm_containers_of_a_crashed_control_plane_are_reaped(spec: SandboxSpec, tmp_path: Path) -> None:
    backend = get_backend("docker")
    script = textwrap.dedent(f"""
        import os
        from backends import SandboxSpec, create_backend
        from backends.pool import WarmPool
        spec = SandboxSpec.model_validate_json({spec.model_dump_json()!r})
        pool = WarmPool(create_backend("docker"), size=2, idle_seconds=600)
        pool.prefill(spec)
        assert pool.wait_ready(spec, {WAIT})
        os._exit(3)  # a crash: nothing closed
    """)
    crashed = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2], check=False)
    assert crashed.returncode == 3
    assert len(containers(backend, spec)) == 2
    assert backend.reap() >= 2
    assert containers(backend, spec) == []


def test_manager_with_a_pool_serves_sessions_distinct_sandboxes_and_releases_them(
    backend: Backend, tmp_path: Path
) -> None:
    settings = load_settings(root=tmp_path, backend=backend.name, pool={"size": 1})
    manager = SandboxManager(settings, backend=lambda: backend)
    manager.prefill()
    pool = manager._pool
    assert pool is not None and pool.wait_ready(base_spec(settings), WAIT)
    one, two = manager.get("session-1"), manager.get("session-2")
    assert one.id != two.id and manager.get("session-1") is one
    assert one.run("echo 1")["output"] == "1\n" and two.run("echo 2")["output"] == "2\n"
    manager.release("session-1")
    with pytest.raises(SandboxGone):
        one.run("true")
    assert pool.wait_ready(base_spec(settings), WAIT)
    manager.close_all()
    with pytest.raises(SandboxGone):
        two.run("true")
    assert pool.warm_count(base_spec(settings)) == 0


BROWSER = "pgrep -o -x chromium || echo none"  # the oldest Chromium process: the browser itself


@contextlib.contextmanager
def browser_pool(
    backend: Backend, root: Path, **settings: Any
) -> Iterator[tuple[SandboxManager, WarmPool, SandboxSpec, Sandbox]]:
    """A manager whose pool (size 1) warms sandboxes for the browser toolset: it, the pool, the spec and
    the warm sandbox, once there is one; every sandbox is closed afterwards."""
    loaded = load_settings(
        root=root, backend=backend.name, toolsets=["browser"], pool={"size": 1}, **settings
    )
    spec = base_spec(loaded)
    manager = SandboxManager(loaded, backend=lambda: backend)
    try:
        manager.prefill()
        pool = manager._pool
        assert pool is not None and pool.wait_ready(spec, WAIT)
        (warm,) = warm_sandboxes(pool, spec)
        yield manager, pool, spec, warm
    finally:
        manager.close_all()


@pytest.mark.needs("browser", "isolation")  # reads Chromium's processes: a process table of its own
def test_a_pooled_sandbox_has_its_browser_up_and_a_sessions_first_navigation_uses_it(
    backend: Backend, tmp_path: Path
) -> None:
    with browser_pool(backend, tmp_path) as (manager, pool, spec, warm):
        assert spec.image == "hermetic-sandbox:browser"
        launched = warm.run(BROWSER)["output"].strip()
        assert launched != "none"  # up before any browser call of a session
        sandbox = manager.get("session-1")
        assert sandbox is warm
        sandbox.runtime.fs_write(path="page.html", content="<title>Pooled</title><button>Go</button>")
        ctx = ToolContext("session-1", "call-1", Limits(), lambda: manager.get("session-1"))
        page = browser_navigate(ctx, NavigateArgs(url=f"file://{spec.workdir}/page.html"))
        assert isinstance(page, ToolResult) and page.ok
        assert "title: Pooled" in page.content and 'button "Go" [ref=' in page.content
        assert sandbox.run(BROWSER)["output"].strip() == launched  # that browser, not a new one
        assert pool.wait_ready(spec, WAIT)  # refilled with another sandbox, its browser up too
        (refill,) = warm_sandboxes(pool, spec)
        assert refill is not warm and refill.run(BROWSER)["output"].strip() != "none"
        other = manager.get("session-2")
        assert other is refill and other is not sandbox


@pytest.mark.needs("browser", "isolation")
def test_a_warm_browser_is_replaced_before_the_runtime_would_close_it(
    backend: Backend, tmp_path: Path
) -> None:
    """The runtime closes a browser unused for HERMETIC_BROWSER_IDLE seconds; the pool retires a warm
    sandbox before that (at 90%), so the one it hands out still has its browser."""
    idle = {"env": {"HERMETIC_BROWSER_IDLE": "20"}}
    with browser_pool(backend, tmp_path, sandbox=idle) as (manager, pool, spec, first):
        slot = pool._slots[spec.model_dump_json()]
        with pool._cond:  # retired after 18 s and replaced (the spec is still in demand: idle 600 s)
            assert pool._cond.wait_for(lambda: [s for s, _ in slot.ready if s is not first], WAIT)
        (second,) = warm_sandboxes(pool, spec)
        assert second.run(BROWSER)["output"].strip() != "none"
        with pytest.raises(SandboxGone):
            first.run("true")


def test_the_browser_is_warmed_only_with_its_toolset_and_the_setting(tmp_path: Path) -> None:
    assert warmup(load_settings(root=tmp_path, toolsets=["terminal"], pool={"size": 1})) is None
    assert warmup(load_settings(root=tmp_path, toolsets=["browser"], pool={"warm_browser": False})) is None
    warm = warmup(load_settings(root=tmp_path, toolsets=["browser"], pool={"size": 1}))
    assert warm is not None and warm.lasts == 300.0


def test_pool_settings_come_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMETIC_POOL__SIZE", "2")
    monkeypatch.setenv("HERMETIC_POOL__IDLE_SECONDS", "30")
    pool = load_settings(root=tmp_path).pool
    assert (pool.size, pool.idle_seconds) == (2, 30)
    assert load_settings(root=tmp_path, pool={"size": 0}).pool.size == 0
    monkeypatch.setenv("HERMETIC_POOL__SIZE", "-1")
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        load_settings(root=tmp_path)


def test_the_api_server_prefills_the_default_profiles_pool_at_startup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_backend("local")
    monkeypatch.setenv("HERMETIC_ROOT", str(tmp_path))
    monkeypatch.setenv("HERMETIC_BACKEND", "local")
    monkeypatch.setenv("HERMETIC_POOL__SIZE", "1")
    app = create_app()
    with TestClient(app):  # runs the lifespan: startup, then shutdown
        manager = app.state.hub.profiles["default"].agent.sandboxes
        spec = base_spec(manager.settings)
        assert manager._pool is not None and manager._pool.wait_ready(spec, WAIT)
        warm = warm_sandboxes(manager._pool, spec)
    assert manager._pool.warm_count(spec) == 0
    assert all(isinstance(sb, LocalSandbox) and not sb.dir.exists() for sb in warm)
