"""Replicas of `hermetic serve` on one PostgreSQL database and one profile home, each a real process on a
loopback port of its own, for the replica tests and `python -m bench.replicas`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psycopg
from hermetic_cli import scripted_env
from ngircd import free_port

if TYPE_CHECKING:
    from postgres import LocalPostgres

    from control_plane.models.fake_llm import FakeLLM

LEASE_SECONDS = 5.0
"""The replicas' lease in the tests: a killed replica's sessions are taken over within it (plus a third)."""


def replica_env(base: Mapping[str, str], database_url: str, **extra: str) -> dict[str, str]:
    """`base` (a scripted_env) on PostgreSQL, with a short lease, room for 30 sessions running at once and
    no background learning (whose reviews would ask the scripted model turns the test did not write)."""
    return {
        **base,
        "HERMETIC_DATABASE_URL": database_url,
        "HERMETIC_API__LEASE_SECONDS": str(LEASE_SECONDS),
        "HERMETIC_LEARNING__ENABLED": "false",
        "HERMETIC_LIMITS__MAX_RUNNING_SESSIONS": "64",  # one machine's replicas: the tests' 30 at once
        "HERMETIC_LIMITS__MAX_SANDBOXES": "64",
        "HERMETIC_SCHEDULER__POLL_SECONDS": "1",  # a job added on one replica is seen by all within 1 s
        **extra,
    }


class ReplicaProcess:
    """One `hermetic serve` on `port`; restartable on the same port (a new replica, as after a crash)."""

    def __init__(self, env: Mapping[str, str], port: int) -> None:
        self.env, self.port = dict(env), port
        self.url = f"http://127.0.0.1:{port}"
        self.said: list[str] = []
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> ReplicaProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "control_plane", "serve", "--port", str(self.port)],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        proc = self.proc  # its stderr, read as it comes so the pipe never fills
        threading.Thread(target=lambda: self.said.extend(proc.stderr or ()), daemon=True).start()
        return self

    def wait_healthy(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not self._healthy():
            assert self.proc is not None and self.proc.poll() is None, f"serve exited: {''.join(self.said)}"
            assert time.monotonic() < deadline, f"serve on {self.port} did not listen in time"
            time.sleep(0.1)

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def kill(self) -> None:
        """SIGKILL: no clean-up of any kind runs (its leases are left to lapse)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def freeze(self) -> None:
        """SIGSTOP: alive but silent (as in a long pause or on a starved CPU), its leases left to lapse."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class Cluster:
    """Replicas on one database and home, the scripted model they ask and a token of their profile."""

    def __init__(self, replicas: list[ReplicaProcess], token: str, model: FakeLLM, database: str) -> None:
        self.replicas, self.model, self.database = replicas, model, database
        self.headers = {"Authorization": f"Bearer {token}"}

    def sql(self, query: str, *params: object) -> list[tuple[Any, ...]]:
        """The rows of a query on the replicas' database (what they recorded there)."""
        with psycopg.connect(self.database.replace("postgresql+psycopg", "postgresql")) as conn:
            return conn.execute(query.encode(), params).fetchall()

    def sessions_held_by(self, replica: ReplicaProcess) -> set[str]:
        """The sessions whose lease `replica` holds (a replica's id holds its pid)."""
        assert replica.proc is not None
        rows = self.sql(
            "SELECT session_id FROM session_leases WHERE owner LIKE %s", f"%:{replica.proc.pid}:%"
        )
        return {str(row[0]) for row in rows}

    def client(self, index: int) -> httpx.Client:
        return httpx.Client(base_url=self.replicas[index].url, headers=self.headers, timeout=60)

    def new_session(self, index: int) -> str:
        with self.client(index) as client:
            return str(client.post("/sessions", json={}).json()["id"])

    def history(self, index: int, session_id: str) -> dict[str, Any]:
        with self.client(index) as client:
            return dict(client.get(f"/sessions/{session_id}").json())


@contextlib.contextmanager
def running_cluster(root: Path, postgres: LocalPostgres) -> Iterator[Cluster]:
    """Three replicas on a new database and the home `root`, the scripted model, a token; all stopped
    (and the database dropped) afterwards."""
    from control_plane.models.fake_llm import FakeLLM

    database = postgres.create_database()
    model = FakeLLM().start()
    token = token_for(root)
    env = replica_env(scripted_env(root, model.url), postgres.url(database))
    replicas = start_replicas(env, [free_port() for _ in range(3)])
    try:
        yield Cluster(replicas, token, model, postgres.url(database))
    finally:
        for replica in replicas:
            replica.stop()
        model.stop()
        postgres.drop_database(database)


def start_replicas(env: Mapping[str, str], ports: list[int]) -> list[ReplicaProcess]:
    """Start one replica per port, all at once, and wait until each serves."""
    replicas = [ReplicaProcess(env, port).start() for port in ports]
    try:
        for replica in replicas:
            replica.wait_healthy()
    except BaseException:  # one did not start: none is left running
        for replica in replicas:
            replica.stop()
        raise
    return replicas


def until(done: Callable[[], object], what: str, timeout: float = 60) -> None:
    """Wait for a condition another process makes true (bounded, never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def token_for(root: Path) -> str:
    """An API token for the default profile under `root` (before the replicas start)."""
    from control_plane.store.tokens import TokenStore

    return TokenStore(root).create("default", "replicas")
