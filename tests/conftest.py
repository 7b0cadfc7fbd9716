"""Fixtures: every backend present on this machine, each with a shared sandbox per test module."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import shutil
import signal
import socket
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx._config
import pytest
from postgres import LocalPostgres
from sshd import LocalSSHD, SSHDUnavailable, start_sshd

from backends import Backend, BackendUnavailable, Sandbox, SandboxSpec, create_backend
from control_plane.store import Store

# The shared fixtures, for every test module: the scripted model, the test servers (PostgreSQL with and
# without pgvector, ngIRCd, Prosody, Synapse, Postfix and Dovecot, the upstream hosts in a namespace, a web
# server on loopback), the served API and the console in Chromium. Loaded as plugins, after this module,
# so they may import it.
pytest_plugins = [
    "fake_llm",
    "postgres",
    "ngircd",
    "prosody",
    "mailserver",
    "synapse_server",
    "netns",
    "network_kit",
    "api_client",
    "console_browser",
]

# Tests stop CLI children with Ctrl-C (SIGINT). A run started in the background without job control
# (`nohup pytest &` from a script) has SIGINT ignored, and an ignored signal stays ignored across exec:
# the children would never see it. A handler (not SIG_IGN) here means SIG_DFL in every child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# httpx waits 5 s for an answer by default: a wall-clock bound in every test request that does not set
# its own, which a loaded CI machine exceeded (a profile opened by its first request). Tests wait on
# conditions, each with its own generous bound; this one is the same for every request a test sends.
TEST_REQUEST_TIMEOUT = 60.0
for _part in ("connect", "read", "write", "pool"):
    setattr(httpx._config.DEFAULT_TIMEOUT_CONFIG, _part, TEST_REQUEST_TIMEOUT)

BACKENDS = ["local", "docker", "ssh", "modal-standin"]
_backends: dict[str, Backend | str] = {}
_sshd: list[LocalSSHD | str] = []
SIOCGIFADDR = 0x8915
"""ioctl: an interface's IPv4 address (linux/sockios.h)."""


def local_sshd() -> LocalSSHD:
    """The test run's sshd on 127.0.0.1, started on first use; skips (with the reason) when it cannot run."""
    if not _sshd:
        try:
            _sshd.append(start_sshd())
        except SSHDUnavailable as exc:
            _sshd.append(str(exc))
    found = _sshd[0]
    if isinstance(found, str):
        pytest.skip(f"no sshd here: {found}")
    return found


def pytest_sessionfinish(session: pytest.Session) -> None:
    for server in _sshd:
        if isinstance(server, LocalSSHD):
            server.stop()


def get_backend(name: str) -> Backend:
    """The backend, built once per test run; skips (with the reason) when it cannot run here."""
    if name not in _backends:
        try:
            if name == "ssh":
                backend = create_backend(name, local_sshd().config())
            elif name == "modal-standin":
                backend = standin_backend()
            else:
                backend = create_backend(name)
            if name == "docker":
                backend.ensure_image(SandboxSpec().image)  # type: ignore[attr-defined]
            _backends[name] = backend
        except BackendUnavailable as exc:
            _backends[name] = str(exc)
    found = _backends[name]
    if isinstance(found, str):
        pytest.skip(f"{name} backend unavailable here: {found}")
    return found


def bridge_gateway(backend: Backend) -> str:
    """The host's address on docker's default bridge, found the way that holds on every dockerd.

    A long-running dockerd lists the bridge's Gateway in IPAM.Config; a freshly started 20.10 lists only
    the Subnet. Then it is the bridge interface's own address (docker0), else the subnet's first host
    (what dockerd gives docker0).
    """
    network = backend.client.networks.get("bridge").attrs  # type: ignore[attr-defined]
    configs = [c for c in (network.get("IPAM") or {}).get("Config") or [] if ":" not in c.get("Subnet", "")]
    for config in configs:
        if config.get("Gateway"):
            return str(config["Gateway"]).split("/")[0]
    interface = (network.get("Options") or {}).get("com.docker.network.bridge.name", "docker0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe, contextlib.suppress(OSError):
        request = struct.pack("256s", interface.encode()[:15])
        return socket.inet_ntoa(fcntl.ioctl(probe.fileno(), SIOCGIFADDR, request)[20:24])
    if configs:
        return str(next(ipaddress.ip_network(configs[0]["Subnet"], strict=False).hosts()))
    raise RuntimeError(f"docker's bridge {interface} has no IPv4 address here: {network.get('IPAM')}")


def standin_backend() -> Backend:
    """The real Modal backend with the stand-in (tests/standins/modal_standin.py) in place of Modal's
    service."""
    from modal_standin import FakeSandbox, lookup_app

    from backends.modal import ModalBackend, ModalConfig

    class ModalStandinBackend(ModalBackend):
        name = "modal-standin"  # so skip reasons say which modal this is
        lacks = {
            "isolation": "the Modal stand-in is the adapter's test bed, not a sandbox: it runs the runtime "
            "as this user, on the host's filesystem (bar its workdir) and network",
            "limits": "the Modal stand-in enforces no pids/memory limits, so a fork bomb would hit the host; "
            "test_modal.py asserts the cpu/memory/timeout mapping",
            "cli": "the CLI runs in a subprocess, which cannot be handed the in-process stand-in",
            "browser": "the Modal stand-in runs the runtime on the host's python, without Playwright; a real "
            "Modal sandbox gets it from the browser image",
        }

    if shutil.which("bwrap") is None:
        raise BackendUnavailable(
            "the Modal stand-in binds its workdir with bubblewrap: apt-get install bubblewrap"
        )
    return ModalStandinBackend(ModalConfig(), sandbox_api=FakeSandbox, app_lookup=lookup_app)


@pytest.fixture(params=BACKENDS, scope="module")
def backend(request: pytest.FixtureRequest) -> Backend:
    return get_backend(request.param)


@pytest.fixture(autouse=True)
def _skip_what_the_backend_lacks(request: pytest.FixtureRequest) -> None:
    """`@pytest.mark.needs("isolation")`: skip, with the backend's reason, where it lacks that by design."""
    marker = request.node.get_closest_marker("needs")
    if marker is None or "backend" not in request.fixturenames:
        return
    backend: Backend = request.getfixturevalue("backend")
    for what in marker.args:
        if what in backend.lacks:
            pytest.skip(f"{backend.name} backend has no {what} by design: {backend.lacks[what]}")


@pytest.fixture
def sshd() -> LocalSSHD:
    return local_sshd()


@pytest.fixture(scope="module")
def sandbox(backend: Backend) -> Iterator[Sandbox]:
    """One sandbox per module and backend: creating one per test would dominate the run time."""
    with backend.create(SandboxSpec(memory="512m", pids=256)) as sb:
        yield sb


@pytest.fixture
def session() -> str:
    """A fresh shell session name, so tests sharing a sandbox do not share shell state."""
    return "t-" + uuid.uuid4().hex[:8]


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A fresh sessions database, on SQLite and on the throwaway PostgreSQL."""
    if request.param == "sqlite":
        with Store(f"sqlite:///{tmp_path}/db/hermetic.db") as opened:
            yield opened
        return
    server: LocalPostgres = request.getfixturevalue("postgres")
    name = server.create_database()
    try:
        with Store(server.url(name)) as opened:
            yield opened
    finally:
        server.drop_database(name)
