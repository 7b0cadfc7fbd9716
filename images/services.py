"""Offline images for the compose deployment, for machines with no registry: the control plane
(`hermetic-agent`), PostgreSQL (`hermetic-postgres`) and the Docker socket proxy (`hermetic-docker-proxy`).

One base rootfs for all three (debootstrap bookworm with python3, Debian's haproxy and postgresql),
keyed by its recipe and Hermetic's dependency list; each service is a thin final stage over it:
- agent: Hermetic's dependencies installed by the host's pip (`--target`, wheels only) into the base,
  then the checkout itself (a wheel built here, `--no-deps`) in the final stage, keyed by the source
  hash, with a `hermetic` user (uid 10001) owning /data;
- postgres: an entrypoint that initialises $PGDATA on first start from POSTGRES_USER / POSTGRES_DB /
  POSTGRES_PASSWORD (like the official image), then runs the server as `postgres`;
- docker-proxy: `haproxy -db -f /usr/local/etc/haproxy/haproxy.cfg` (compose mounts the config).
Tags: `hermetic-<service>:offline`, and `:<hash>` for the exact build.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

import docker
from docker.errors import DockerException

from . import build
from .build import ImageBuildError
from .progress import ignore

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
SERVICES = ("agent", "postgres", "docker-proxy")
SERVICE_RECIPE = "1"  # bump whenever the steps below change
LIB = "/opt/hermetic/lib"
PGBIN = "/usr/lib/postgresql/15/bin"
SOURCES = ("control_plane", "backends", "sandboxes", "images")

POSTGRES_ENTRYPOINT = f"""#!/bin/bash
# First start: initialise the cluster as the official postgres image does, then serve.
set -euo pipefail
export PGDATA="${{PGDATA:-/var/lib/postgresql/data}}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${{POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}}"
  user="${{POSTGRES_USER:-postgres}}"
  pw="$(mktemp)"; printf '%s' "$POSTGRES_PASSWORD" > "$pw"
  # the socket inside the container trusts (as the official image); over the network, a password
  {PGBIN}/initdb -D "$PGDATA" --username="$user" --pwfile="$pw" --encoding=UTF8 \\
    --auth-local=trust --auth-host=scram-sha-256
  rm -f "$pw"
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  {PGBIN}/pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
  if [ -n "${{POSTGRES_DB:-}}" ] && [ "$POSTGRES_DB" != "$user" ]; then
    {PGBIN}/createdb --username="$user" "$POSTGRES_DB"
  elif [ "$user" != postgres ]; then
    {PGBIN}/createdb --username="$user" "$user"
  fi
  {PGBIN}/pg_ctl -D "$PGDATA" -m fast -w stop
fi
exec {PGBIN}/postgres -D "$PGDATA"
"""
HERMETIC_WRAPPER = f"""#!/usr/bin/python3
import sys
sys.path.insert(0, "{LIB}")
from control_plane.cli.main import run
sys.exit(run())
"""
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "PYTHONPATH": LIB,
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True)
class Final:
    """How a service's image runs: its user, environment, working directory and command."""

    user: str
    env: dict[str, str]
    workdir: str
    cmd: list[str]


FINALS = {
    "agent": Final(
        "hermetic", {**ENV, "HERMETIC_ROOT": "/data", "HOME": "/data"}, "/data",
        ["hermetic", "serve", "--host", "0.0.0.0", "--port", "8765"],
    ),
    "postgres": Final(
        "postgres", {**ENV, "PGDATA": "/var/lib/postgresql/data"}, "/var/lib/postgresql",
        ["/usr/local/bin/postgres-entrypoint"],
    ),
    # root: to open /var/run/docker.sock (root:docker 0660); compose drops every capability
    "docker-proxy": Final(
        "root", ENV, "/", ["/usr/sbin/haproxy", "-db", "-f", "/usr/local/etc/haproxy/haproxy.cfg"]
    ),
}  # fmt: skip


def dependencies() -> list[str]:
    """Hermetic's runtime dependencies as pyproject.toml lists them."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def base_hash() -> str:
    inputs = {"recipe": SERVICE_RECIPE, "base": build.RECIPE_VERSION, "deps": dependencies()}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def source_hash() -> str:
    digest = hashlib.sha256(base_hash().encode())
    for top in SOURCES:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    digest.update((REPO / "pyproject.toml").read_bytes())
    return digest.hexdigest()


def _final_hash(service: str) -> str:
    """What a final stage is made of: the base, its settings and scripts, and for the agent the source."""
    recipe = json.dumps(
        [service, asdict(FINALS[service]), POSTGRES_ENTRYPOINT, HERMETIC_WRAPPER], sort_keys=True
    )
    key = source_hash() if service == "agent" else base_hash()
    return hashlib.sha256(f"{key}\0{recipe}".encode()).hexdigest()


def ensure_service_images(
    client: docker.DockerClient | None = None, *, force: bool = False
) -> dict[str, str]:
    """Build what is missing; returns service -> tag (`hermetic-<service>:offline` points at it)."""
    client = client or build._connect()
    base = f"hermetic-base:service-{base_hash()[:12]}"
    with build._lock("service"):
        if force or not build._exists(client, base):
            _build_base(client, base)
        tags = {}
        for service in SERVICES:
            tag = f"hermetic-{service}:{_final_hash(service)[:12]}"
            if force or not build._exists(client, tag):
                _build_final(client, base, service, tag)
            client.images.get(tag).tag(f"hermetic-{service}", "offline")
            tags[service] = tag
    return tags


def _build_base(client: docker.DockerClient, tag: str) -> None:
    """bookworm + python3, haproxy, postgresql; Hermetic's dependencies (wheels) under LIB."""
    workdir = Path(tempfile.mkdtemp(prefix="hermetic-image-", dir=build.TMP_ROOT))
    try:
        rootfs = workdir / "rootfs"
        build._build_rootfs("service", rootfs, ignore)
        pip = (sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check")
        build._run(*pip, "--only-binary=:all:", "--no-warn-script-location", "--target",
                   str(rootfs / LIB.lstrip("/")), *dependencies(), env=dict(os.environ))  # fmt: skip
        tarball = workdir / "rootfs.tar"
        build._run(
            "tar", "--format=posix", "--numeric-owner", "-C", str(rootfs), "-c", "-f", str(tarball), "."
        )
        build.import_tarball(client, tarball, tag, [])
    finally:
        subprocess.run(["rm", "-rf", str(workdir)], check=False)


def _build_final(client: docker.DockerClient, base: str, service: str, tag: str) -> None:
    """A container of the base, the service's files and setup in it, committed with its CMD."""
    final = FINALS[service]
    files: dict[str, tuple[bytes, int]] = {}
    script = "true"
    if service == "agent":
        files.update(_hermetic_wheel_files())
        files["usr/local/bin/hermetic"] = (HERMETIC_WRAPPER.encode(), 0o755)
        script = (
            "useradd -u 10001 -U -d /data -M -s /usr/sbin/nologin hermetic"
            " && install -d -o hermetic -g hermetic -m 0700 /data"
            # compose mounts the sockets volume there: a fresh volume takes this owner and mode
            " && install -d -o hermetic -g hermetic -m 0711 /data/.hermetic /data/.hermetic/net"
        )
    elif service == "postgres":
        files["usr/local/bin/postgres-entrypoint"] = (POSTGRES_ENTRYPOINT.encode(), 0o755)
        script = "install -d -o postgres -g postgres -m 0700 /var/lib/postgresql/data /var/run/postgresql"
    elif service == "docker-proxy":
        script = "install -d /usr/local/etc/haproxy"
    name = f"hermetic-build-{tag.replace(':', '-')}"
    try:
        container = client.containers.create(base, ["/bin/sh", "-c", script], name=name, network_mode="none")
    except DockerException as exc:
        raise ImageBuildError(f"cannot create a container from {base}: {exc}") from exc
    try:
        if files and not container.put_archive("/", _tar(files)):
            raise ImageBuildError(f"could not copy the {service} files into {name}")
        container.start()
        if container.wait(timeout=300)["StatusCode"] != 0:
            raise ImageBuildError(
                f"setting up {service} failed: {container.logs().decode(errors='replace')[-2000:]}"
            )
        changes = [f"ENV {k}={v}" for k, v in final.env.items()]
        changes += [f"USER {final.user}", f"WORKDIR {final.workdir}", f"CMD {json.dumps(final.cmd)}",
                    f'LABEL org.hermetic.service="{service}"']  # fmt: skip
        repo, _, version = tag.partition(":")
        container.commit(repository=repo, tag=version, changes=changes)
    except DockerException as exc:
        raise ImageBuildError(f"building {tag} failed: {exc}") from exc
    finally:
        container.remove(force=True)
    log.info("built %s", tag)


def _hermetic_wheel_files() -> dict[str, tuple[bytes, int]]:
    """This checkout as installed files under LIB (a wheel built here, no dependencies)."""
    with tempfile.TemporaryDirectory() as target:
        pip = (sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps")
        build._run(*pip, "--no-warn-script-location", "--target", target, str(REPO),
                   env=dict(os.environ))  # fmt: skip
        out = {}
        for path in Path(target).rglob("*"):
            rel = path.relative_to(target)
            if path.is_file() and rel.parts[0] != "bin" and "__pycache__" not in rel.parts:
                out[f"{LIB.lstrip('/')}/{rel}"] = (path.read_bytes(), 0o644)
        return out


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m images.services", description=__doc__)
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        for service, tag in ensure_service_images(force=args.force).items():
            print(f"{service}: {tag}")
    except ImageBuildError as exc:
        parser.exit(1, f"error: {exc}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
