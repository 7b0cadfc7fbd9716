"""The containerised control plane against the host's: sandbox round trip and create-to-first-command
from inside the compose deployment (through the Docker socket proxy) beside the same from this host
(dockerd's socket). Target: within 1.2x.

    python -m bench.compose [-n 300] [--creates 10]

Brings up the stack from the offline images (images/services.py) under a throwaway project name and
takes it down again, volumes included.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import uuid
from pathlib import Path

from .stats import Figure, report

COMPOSE = Path(__file__).resolve().parent.parent / "compose"
PROBE = """
import json, sys, time
from backends import SandboxSpec
from backends.docker import DockerBackend
n, creates = int(sys.argv[1]), int(sys.argv[2])
backend = DockerBackend()
create = []
for _ in range(creates):
    start = time.perf_counter()
    with backend.create(SandboxSpec()) as sandbox:
        sandbox.run("true")
        create.append(time.perf_counter() - start)
with backend.create(SandboxSpec()) as sandbox:
    for _ in range(20):
        sandbox.run("true")
    trips = []
    for _ in range(n):
        start = time.perf_counter()
        sandbox.run("true")
        trips.append(time.perf_counter() - start)
print(json.dumps({"round trip": trips, "create to first command": create}))
"""


def _probe(command: list[str], n: int, creates: int) -> dict[str, list[float]]:
    done = subprocess.run([*command, str(n), str(creates)], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"probe failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.compose", description=__doc__)
    parser.add_argument("-n", type=int, default=300, help="round trips")
    parser.add_argument("--creates", type=int, default=10, help="sandboxes created")
    args = parser.parse_args(argv)
    from images.build import ensure_image
    from images.services import ensure_service_images

    ensure_image("slim")
    ensure_service_images()
    project = f"hmbench{uuid.uuid4().hex[:8]}"
    files = [COMPOSE / "docker-compose.yml", COMPOSE / "docker-compose.offline.yml"]
    base = ["docker-compose", "-p", project, *(a for f in files for a in ("-f", str(f)))]
    subprocess.run([*base, "up", "-d", "docker-proxy", "hermetic"], check=True, capture_output=True)
    try:
        inside = _probe([*base, "exec", "-T", "hermetic", "python3", "-c", PROBE], args.n, args.creates)
    finally:
        subprocess.run([*base, "down", "-v"], check=False, capture_output=True)
    host = _probe([sys.executable, "-c", PROBE], args.n, args.creates)
    results: dict[str, list[float] | Figure] = {}
    for what in ("round trip", "create to first command"):
        ratio = sorted(inside[what])[len(inside[what]) // 2] / sorted(host[what])[len(host[what]) // 2]
        results[f"docker from the host: {what}"] = host[what]
        results[f"docker from compose, through the proxy: {what}"] = Figure(
            inside[what], note=f"{ratio:.2f}x the host's median (target <= 1.2x)", extra={"ratio": ratio}
        )
    report("Compose deployment vs host", results, Path(__file__).parent / "results", {})


if __name__ == "__main__":
    main()
