"""One `hermetic serve` per SQLite profile (the lock beside hermetic.db); PostgreSQL takes none."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pytest
from hermetic_cli import hermetic, scripted_env
from ngircd import free_port
from postgres import LocalPostgres

from control_plane.store.serve_lock import serving

NO_MODEL = "http://127.0.0.1:9/v1"  # serving starts no turn, so no model is asked


class Served:
    """`hermetic serve` as a user starts it, on a port of its own."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "control_plane", "serve", "--port", str(self.port)],
            env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def healthy(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def wait_listening(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            assert self.proc.poll() is None, f"serve exited: {self.proc.communicate()[1]}"
            assert time.monotonic() < deadline, "serve did not listen in time"
            time.sleep(0.1)

    def wait_holding(self, lock: Path, timeout: float = 120) -> None:
        """Until this server holds the serve lock (it names itself in the file), well before it listens."""
        deadline = time.monotonic() + timeout
        while f'"pid": {self.proc.pid},' not in (lock.read_text() if lock.exists() else ""):
            assert self.proc.poll() is None, f"serve exited: {self.proc.communicate()[1]}"
            assert time.monotonic() < deadline, "serve did not take the lock in time"
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=30)


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
        served = start(servers, scripted_env(tmp_path, NO_MODEL, HERMETIC_DATABASE_URL=url))
        served.wait_listening()
        with serving(url, "127.0.0.1:1"), serving(url, "127.0.0.1:2"):  # what a second serve would take
            assert served.healthy()
        assert not list(tmp_path.rglob("*.serve.lock"))
    finally:
        for served in servers:
            served.stop()
        servers.clear()
        postgres.drop_database(database)
