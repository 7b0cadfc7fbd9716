"""One virtual environment per peer under bench/.peers/, named by a hash of what is installed in it.

Never the project's environment: a peer pins its own versions (hermes-agent pins rich, pydantic,
requests, ...). A venv is reused only when its `.ready` marker exists, written after the install
and an import probe both passed; anything else is rebuilt from scratch.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / ".peers"
PIP_TIMEOUT = 900  # seconds for one pip install; a stuck index must not hang the benchmark


@dataclass(frozen=True)
class Peer:
    name: str
    requirements: tuple[str, ...]
    probe: str
    """Python run in the new venv: the imports the runner needs."""
    runner: str
    """Script in bench/peers/ run by the venv's python."""


PEERS = {
    peer.name: peer
    for peer in (
        Peer(
            "hermes-agent",
            ("hermes-agent==0.19.0",),
            "from tools.environments.docker import DockerEnvironment\n"
            "from tools.environments.local import LocalEnvironment\n"
            "from tools.file_operations import ShellFileOperations",
            "run_hermes.py",
        ),
        Peer(
            "swe-rex",
            # SWE-ReX's RemoteRuntime imports aiohttp without declaring it.
            ("swe-rex==1.4.0", "aiohttp==3.14.5"),
            "import aiohttp\n"
            "from swerex.deployment.docker import DockerDeployment\n"
            "from swerex.deployment.local import LocalDeployment",
            "run_swerex.py",
        ),
    )
}


class PeerUnavailable(RuntimeError):
    """A peer's venv could not be built; the message carries pip's or the probe's output tail."""


@dataclass(frozen=True)
class Venv:
    path: Path
    built: bool
    seconds: float

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def venv_dir(peer: Peer) -> Path:
    inputs = {"requirements": peer.requirements, "python": sys.version_info[:2]}
    digest = hashlib.sha256(json.dumps(inputs).encode()).hexdigest()
    return ROOT / f"{peer.name}-{digest[:12]}"


def ensure_venv(peer: Peer) -> Venv:
    """The peer's venv, built (python -m venv, pip install, import probe) unless already ready."""
    path = venv_dir(peer)
    start = time.perf_counter()
    with _lock(path):
        if (path / ".ready").exists():
            return Venv(path, False, time.perf_counter() - start)
        shutil.rmtree(path, ignore_errors=True)
        _step([sys.executable, "-m", "venv", str(path)], f"creating the {peer.name} venv")
        python = str(path / "bin" / "python")
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        _step([*pip, *peer.requirements], f"pip install {' '.join(peer.requirements)}")
        _step([python, "-c", peer.probe], f"importing {peer.name} in its venv")
        (path / ".ready").write_text("\n".join(peer.requirements) + "\n")
    return Venv(path, True, time.perf_counter() - start)


def _step(cmd: list[str], what: str) -> None:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise PeerUnavailable(f"{what}: no answer in {PIP_TIMEOUT}s") from exc
    if res.returncode != 0:
        # pip warns once per package about each unreachable index location: noise before the cause
        lines = [line for line in (res.stdout + res.stderr).splitlines() if "is ignored" not in line]
        raise PeerUnavailable(f"{what} failed (exit {res.returncode}):\n" + "\n".join(lines[-20:]))


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """Serialize builders of one venv across processes (two benchmark runs at once)."""
    ROOT.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
