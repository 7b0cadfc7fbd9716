"""The one image every contender runs: hermetic-sandbox:slim plus swe-rex (`swerex-remote` on PATH).

Built offline: wheels are downloaded on the host (pip, through whatever index it is configured
with), then installed in a container of the slim image with no network and committed. The slim
image has no pip, so the downloaded pip wheel runs itself from its zip. The tag carries a hash of
what goes in, so a rerun finds it. bench/peers/Dockerfile is the same recipe for a registry.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import docker
from docker.errors import ImageNotFound

BASE = "hermetic-sandbox:slim"
REPO = "hermetic-sandbox"
REQUIREMENTS = ("swe-rex==1.4.0",)
RECIPE = "2"  # bump when the steps below change
WHEELS = "/tmp/hermetic-wheels"
IMAGE_PYTHON = "3.11"  # bookworm's python3
IMAGE_GLIBC = 36  # bookworm's glibc is 2.36: manylinux wheels up to 2_36 load in the image


class ImageUnavailable(RuntimeError):
    """The peers image could not be built; the message says why."""


def tag_for(base_id: str) -> str:
    inputs = {"base": base_id, "requirements": REQUIREMENTS, "recipe": RECIPE}
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return f"{REPO}:peers-{digest[:12]}"


def ensure_image(client: docker.DockerClient | None = None) -> tuple[str, bool]:
    """Return (tag, built): the peers image, building it only when its content hash is new."""
    client = client or docker.from_env()
    try:
        base = client.images.get(BASE)
    except ImageNotFound as exc:
        raise ImageUnavailable(f"{BASE} is missing; build it with `python3 -m images.build`") from exc
    tag = tag_for(base.id)
    try:
        client.images.get(tag)
        return tag, False
    except ImageNotFound:
        pass
    with tempfile.TemporaryDirectory(prefix="hermetic-peers-wheels-") as wheels:
        _download(Path(wheels))
        _install_and_commit(client, Path(wheels), tag)
    return tag, True


def _download(wheels: Path) -> None:
    machine = platform.machine()
    # Every tag the image accepts: older pips do not expand manylinux_2_36 to the tags below it.
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(IMAGE_GLIBC, 4, -1)]
    tags += [f"manylinux{legacy}_{machine}" for legacy in ("2014", "2010", "1")]
    platforms = [arg for tag in tags for arg in ("--platform", tag)]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
           "--only-binary=:all:", "--python-version", IMAGE_PYTHON, "--implementation", "cp",
           *platforms, "-d", str(wheels), "pip", *REQUIREMENTS]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise ImageUnavailable(f"pip download failed:\n{_tail(res.stderr)}")


def _install_and_commit(client: docker.DockerClient, wheels: Path, tag: str) -> None:
    # The wheels are copied in, not bind-mounted: a mount point would end up as a VOLUME in the image.
    pip_wheel = next(wheels.glob("pip-*.whl")).name
    install = ["python3", f"{WHEELS}/{pip_wheel}/pip", "install", "--no-index", "--find-links", WHEELS,
               "--no-cache-dir", "--disable-pip-version-check", "--root-user-action=ignore",
               "--break-system-packages", *REQUIREMENTS]  # fmt: skip
    script = f"{' '.join(install)} && rm -rf {WHEELS} && command -v swerex-remote && swerex-remote --version"
    container = client.containers.create(BASE, ["sh", "-c", script], user="root", network_mode="none")
    try:
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            tar.add(wheels, arcname=WHEELS.lstrip("/"))
        container.put_archive("/", archive.getvalue())
        container.start()
        status = container.wait()["StatusCode"]
        if status != 0:
            raise ImageUnavailable(f"installing {REQUIREMENTS} in {BASE} failed:\n{_tail(container.logs())}")
        repo, _, name = tag.partition(":")
        changes = ['CMD ["sleep", "infinity"]', f'LABEL org.hermetic.peers="{" ".join(REQUIREMENTS)}"']
        container.commit(repository=repo, tag=name, changes=changes)
    finally:
        container.remove(force=True)


def _tail(text: str | bytes, lines: int = 30) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])
