"""One `hermetic serve` per SQLite profile (the lock beside hermetic.db); PostgreSQL takes none."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import httpx
import pytest
from hermetic_cli import hermetic, scripted_env
from ngircd import free_port
from postgres import LocalPostgres

NO_MODEL = "http://127.0.0.1:9/v1"  # serving starts no turn, so no model is asked


class Served:
    """`hermetic serve` as a user starts it, on a port of its own."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "control_plane", "serve", "--port", str(self.port)],
            env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.said: list[str] = []  # its stderr, read as it comes so the pipe never fills
        self._reader = threading.Thread(target=lambda: self.said.extend(self.proc.stderr or ()), daemon=True)
        self._reader.start()

    def healthy(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def wait_listening(self) -> None:
        self._until(self.healthy, "listen")

    def wait_starting_its_app(self) -> None:
        """Until uvicorn starts the app (past the lock, before the seconds of warm-up)."""
        self._until(lambda: any("Waiting for application startup" in line for line in self.said), "start")

    def wait_holding(self, lock: Path) -> None:
        """Until this server holds the serve lock (it names itself in the file), well before it listens."""
        self._until(lambda: f'"pid": {self.proc.pid},' in (lock.read_text() if lock.exists() else ""), "lock")

    def _until(self, done: Callable[[], bool], what: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert self.proc.poll() is None, f"serve exited: {''.join(self.said)}"
            assert time.monotonic() < deadline, f"serve did not {what} in time"
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        self._reader.join(30)


@pytest.fixture
def servers() -> Iterator[list[Served]]:
    """The test's servers, killed at its end."""
    started: list[Served] = []
    yield started
    for served in started:
        served.stop()


def start(servers: list[Served], env: Mapping[str, str]) -> Served:
    servers.append(Served(env))
    return servers[-1]


def test_a_second_serve_on_one_sqlite_profile_is_refused_until_the_first_dies(
    tmp_path: Path, servers: list[Served]
) -> None:
    env = scripted_env(tmp_path, NO_MODEL)
    first = start(servers, env)
    lock = tmp_path / "hermetic.db.serve.lock"
    first.wait_holding(lock)  # it goes on starting while the second runs

    second = hermetic("serve", "--port", str(free_port()), env=env, timeout=120)
    said = " ".join(second.stderr.split())  # rich wraps the message at the terminal's width
    assert second.returncode == 3, said
    assert f"already serves {tmp_path / 'hermetic.db'}" in said
    assert f"pid {first.proc.pid}" in said and f"listening on 127.0.0.1:{first.port}" in said
    first.wait_listening()  # the first one serves on, untouched

    first.proc.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel drops the lock
    first.proc.wait(30)
    start(servers, env).wait_holding(lock)  # the next one takes the lock and goes on starting


def test_a_postgresql_profile_takes_no_serve_lock(
    tmp_path: Path, postgres: LocalPostgres, servers: list[Served]
) -> None:
    database = postgres.create_database()
    url = postgres.url(database)
    try:
        env = scripted_env(tmp_path, NO_MODEL, HERMETIC_DATABASE_URL=url)
        one, two = start(servers, env), start(servers, env)  # at once: neither waits for the other
        one.wait_starting_its_app()
        two.wait_starting_its_app()
        assert not list(tmp_path.rglob("*.serve.lock"))
    finally:
        for served in servers:
            served.stop()
        servers.clear()
        postgres.drop_database(database)
