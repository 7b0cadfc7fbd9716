"""The peers (hermes-agent, SWE-ReX) measured in the same run as ours, against the same image.

Each peer lives in its own venv (venvs.py) and is driven by a runner script (run_<peer>.py) under
that venv's python, which prints its figures as JSON. A peer that cannot be installed or crashes
is reported and skipped: the benchmark never fails because of a peer.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections import deque
from pathlib import Path

from ..stats import Figure, Results
from .runner_kit import sweep
from .sandbox_image import ensure_image
from .venvs import PEERS, Peer, PeerUnavailable, ensure_venv

HERE = Path(__file__).resolve().parent
RUN_TIMEOUT = 1800  # seconds for one runner; past it the runner is stopped and its containers removed
STDERR_TAIL = 20  # lines of a failed runner's stderr in the report


def image() -> str:
    """Tag of the image every contender runs (hermetic-sandbox:slim + swe-rex), built if missing."""
    return ensure_image()[0]


def setup(peers: list[str]) -> list[str]:
    """Build what is missing (image, venvs); one line per item saying what was done."""
    _check(peers)
    tag, built = ensure_image()
    lines = [f"image {tag}: {'built' if built else 'present'}"]
    for name in peers:
        try:
            venv = ensure_venv(PEERS[name])
        except PeerUnavailable as exc:
            lines.append(f"{name}: cannot be installed: {exc}")
            continue
        done = f"built in {venv.seconds:.0f} s" if venv.built else "present"
        lines.append(f"{name} venv {venv.path}: {done}")
    return lines


def collect(peers: list[str], n: int, concurrency: list[int], targets: list[str]) -> Results:
    """Figures of each peer in `peers` (names in PEERS); a peer that fails is printed and skipped."""
    _check(peers)
    tag = image()
    results: Results = {}
    for name in peers:
        try:
            results.update(run_peer(PEERS[name], tag, n, concurrency, targets))
        except PeerUnavailable as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
    return results


def _check(peers: list[str]) -> None:
    unknown = set(peers) - set(PEERS)
    if unknown:
        raise ValueError(f"unknown peers {sorted(unknown)}; expected some of {sorted(PEERS)}")


def run_peer(peer: Peer, tag: str, n: int, concurrency: list[int], targets: list[str]) -> Results:
    """Run the peer's runner in its venv and parse what it printed; PeerUnavailable if it failed."""
    venv = ensure_venv(peer)
    run_id = uuid.uuid4().hex[:12]
    cmd = [str(venv.python), str(HERE / peer.runner), "--image", tag, "-n", str(n),
           "--concurrency", ",".join(map(str, concurrency)), "--targets", ",".join(targets),
           "--run-id", run_id]  # fmt: skip
    print(f"measuring {peer.name} ({', '.join(targets)})", file=sys.stderr)
    try:
        code, stdout, tail = _run_runner(cmd)
    finally:
        sweep(run_id)  # whatever a killed runner left behind
    if code != 0:
        raise PeerUnavailable(f"its runner exited {code}; the end of its stderr:\n{tail}")
    return parse_output(stdout)


def _run_runner(cmd: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, the last lines of stderr); stderr is echoed as it comes (progress)."""
    tail: deque[str] = deque(maxlen=STDERR_TAIL)
    out: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        stdout, stderr = proc.stdout, proc.stderr

        def echo() -> None:
            for line in stderr:
                sys.stderr.write(line)
                tail.append(line)

        readers = [
            threading.Thread(target=lambda: out.append(stdout.read()), daemon=True),
            threading.Thread(target=echo, daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            code = proc.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.terminate()  # the runner turns SIGTERM into its cleanup
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            raise PeerUnavailable(f"its runner did not finish in {RUN_TIMEOUT} s") from None
        finally:
            for reader in readers:
                reader.join(timeout=30)  # a killed runner's orphans may hold the pipes open
    return code, "".join(out), "".join(tail)


def parse_output(stdout: str) -> Results:
    """The runner's JSON ({"figures": {name: {"samples", "note", "extra"}}}) as Figures.

    Raises PeerUnavailable when it is not that shape, with the start of what was printed.
    """
    try:
        figures = json.loads(stdout)["figures"]
        return {
            name: Figure(
                samples=[float(s) for s in value["samples"]],
                note=str(value.get("note", "")),
                extra={str(k): float(v) for k, v in value.get("extra", {}).items()},
            )
            for name, value in figures.items()
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PeerUnavailable(f"its runner printed no figures ({exc}): {stdout[:300]!r}") from exc
