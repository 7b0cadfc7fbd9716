"""A task's image: its environment/Dockerfile built by the local dockerd from base images present here
(never a pull), tagged by the hash of the environment's files and its bases' ids, so it is built once."""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path

import docker
from docker.errors import APIError, BuildError, ImageNotFound

from .task import Task

DEFAULT_IMAGE = "hermetic-sandbox:slim"
"""A task without environment/Dockerfile runs in the default sandbox image."""
DEFAULT_WORKDIR = "/app"
TASK_REPO = "hermetic-task"
_FROM = re.compile(r"^\s*FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", re.IGNORECASE | re.MULTILINE)
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


class TaskEnvironmentError(RuntimeError):
    """The task's environment cannot be had here: a base image absent, a failed build."""


def base_images(dockerfile: str) -> list[str]:
    """The images a Dockerfile builds FROM (earlier stages and `scratch` left out)."""
    stages: set[str] = set()
    bases = []
    for match in _FROM.finditer(dockerfile):
        image, stage = match.group(1), match.group(2)
        if image.lower() != "scratch" and image.lower() not in stages:
            bases.append(image)
        if stage:
            stages.add(stage.lower())
    return bases


def task_image(client: docker.DockerClient, task: Task) -> tuple[str, str]:
    """The task's image tag and its working directory, building the image when it is not cached.
    Raises TaskEnvironmentError with the file and the reason."""
    image = task.config.environment.docker_image
    if task.dockerfile is None and image is None:  # the default sandbox image, the agent in /app
        _present(client, DEFAULT_IMAGE)
        return DEFAULT_IMAGE, task.config.environment.workdir or DEFAULT_WORKDIR
    if task.dockerfile is None:
        assert image is not None
        return image, _workdir(client, image, task, "task.toml: environment.docker_image")
    text = task.dockerfile.read_text(encoding="utf-8", errors="replace")
    bases = base_images(text)
    if not bases:
        raise TaskEnvironmentError("environment/Dockerfile: no FROM line")
    try:
        ids = [_present(client, base) for base in bases]
    except TaskEnvironmentError as exc:
        raise TaskEnvironmentError(f"environment/Dockerfile: {exc}") from None
    tag = f"{TASK_REPO}:{_slug(task.id)}-{_digest(task.dockerfile.parent, ids)}"
    with _lock_for(tag):
        if not _exists(client, tag):
            _build(client, task, tag)
    return tag, _workdir(client, tag, task, "environment/Dockerfile")


def _present(client: docker.DockerClient, base: str) -> str:
    if "$" in base:
        raise TaskEnvironmentError(
            f"environment/Dockerfile: FROM {base}: build arguments in FROM are not supported"
        )
    try:
        return str(client.images.get(base).id)
    except ImageNotFound:
        variant = base.partition(":")[2] or "slim"
        hint = (
            f"build it with `hermetic image build --variant {variant}`"
            if base.startswith("hermetic-sandbox")
            else f"`docker load` or build {base} on this machine first"
        )
        raise TaskEnvironmentError(
            f"base image {base} is not present here and is never pulled; {hint}"
        ) from None


def _build(client: docker.DockerClient, task: Task, tag: str) -> None:
    """Build with no network (RUN steps cannot fetch) and no pull; the last log lines on failure."""
    assert task.dockerfile is not None
    try:
        client.images.build(
            path=str(task.dockerfile.parent),
            tag=tag,
            pull=False,
            rm=True,
            forcerm=True,
            network_mode="none",
            timeout=int(task.config.environment.build_timeout_sec),
            labels={"org.hermetic.task": task.id},
        )
    except BuildError as exc:
        lines = [str(c.get("stream", "")).strip() for c in exc.build_log if isinstance(c, dict)]
        tail = " | ".join(line for line in lines if line)[-600:]
        raise TaskEnvironmentError(f"environment/Dockerfile: the build failed: {exc.msg} ({tail})") from None
    except (APIError, OSError) as exc:
        raise TaskEnvironmentError(f"environment/Dockerfile: the build failed: {exc}") from None


def _workdir(client: docker.DockerClient, image: str, task: Task, source: str) -> str:
    if task.config.environment.workdir:
        return task.config.environment.workdir
    try:
        config = client.images.get(image).attrs.get("Config") or {}
    except ImageNotFound:
        raise TaskEnvironmentError(
            f"{source}: image {image} is not present here and is never pulled"
        ) from None
    found = str(config.get("WorkingDir") or "")
    return found if found and found != "/" else DEFAULT_WORKDIR


def _digest(directory: Path, base_ids: list[str]) -> str:
    digest = hashlib.sha256("\n".join(base_ids).encode())
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(directory)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
        digest.update(str(path.stat().st_mode & 0o777).encode())
    return digest.hexdigest()[:12]


def _slug(task_id: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", task_id.lower()).strip("-.")[:80] or "task"


def _exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except ImageNotFound:
        return False


def _lock_for(tag: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(tag, threading.Lock())
