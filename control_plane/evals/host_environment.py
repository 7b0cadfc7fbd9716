"""A task's environment where no image is built (the local, ssh and modal backends): the backend's own
system (on modal: Hermetic's own image) plus the task's files. A Dockerfile is honoured when all it
does is add files and set-up commands to the default image: FROM the default image, WORKDIR, ENV,
COPY/ADD of the task's own files, RUN (run in the sandbox as its user, before the agent starts). Any
other instruction needs an image, so docker, and the task says so with the line."""

from __future__ import annotations

import json
import posixpath
import shlex
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from backends import Sandbox

from .environment import DEFAULT_IMAGE, DEFAULT_WORKDIR, TaskEnvironmentError
from .task import Task

BASES = {DEFAULT_IMAGE, DEFAULT_IMAGE.partition(":")[0]}
IGNORED = {"LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "MAINTAINER", "STOPSIGNAL", "HEALTHCHECK"}
"""Instructions that change nothing the agent or the verifier sees (a task's container runs no CMD)."""
ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".zip")
RUNS = {"modal": "Hermetic's own image plus the task's files, not the task's image"}
"""What a backend runs a task in, when it is not its own system."""


def _needs_docker(backend: str) -> str:
    runs = RUNS.get(backend, "its own system, not an image")
    return f"the {backend} backend runs {runs}; run this task with --backend docker"


@dataclass(frozen=True)
class CopyStep:
    line: int
    sources: tuple[str, ...]
    """Paths relative to environment/."""
    dirs: tuple[bool, ...]
    """Which sources are directories."""
    dest: str
    """Absolute in the sandbox; a directory when it ends with '/'."""


@dataclass(frozen=True)
class RunStep:
    line: int
    command: str
    workdir: str
    env: tuple[tuple[str, str], ...]


@dataclass
class HostEnvironment:
    workdir: str = DEFAULT_WORKDIR
    env: dict[str, str] = field(default_factory=dict)
    steps: list[CopyStep | RunStep] = field(default_factory=list)
    context: Path | None = None
    """environment/, uploaded once when a step copies from it."""


def host_environment(task: Task, backend: str) -> HostEnvironment:
    """What the task needs on a backend with no image builder. Raises TaskEnvironmentError naming the
    Dockerfile's line when it asks for more than files and commands on the default image."""
    config = task.config.environment
    if config.docker_image is not None:
        raise TaskEnvironmentError(
            f"task.toml: environment.docker_image = {config.docker_image}: {_needs_docker(backend)}"
        )
    found = HostEnvironment()
    if task.dockerfile is not None:
        found = _read(task.dockerfile, backend)
    if config.workdir:
        found.workdir = config.workdir
    return found


def _read(dockerfile: Path, backend: str) -> HostEnvironment:
    found = HostEnvironment(context=dockerfile.parent)
    workdir, env, bases = "/", dict[str, str](), 0
    for line, keyword, rest in _instructions(dockerfile.read_text(encoding="utf-8", errors="replace")):
        where = f"environment/Dockerfile line {line}: {keyword}"
        needs_docker = _needs_docker(backend)
        if keyword == "FROM":
            bases += 1
            image = rest.split()[0] if rest.split() else ""
            if bases > 1 or image not in BASES:
                raise TaskEnvironmentError(f"{where} {rest}: {needs_docker}")
        elif keyword in IGNORED:
            continue
        elif keyword == "WORKDIR":
            if "$" in rest:
                raise TaskEnvironmentError(f"{where}: variables in WORKDIR are not supported here")
            workdir = posixpath.normpath(posixpath.join(workdir, rest.strip()))
        elif keyword == "ENV":
            env.update(_env(rest, where))
        elif keyword in ("COPY", "ADD"):
            found.steps.append(_copy(line, keyword, rest, workdir, dockerfile.parent, where))
        elif keyword == "RUN":
            if rest.startswith("--"):
                raise TaskEnvironmentError(f"{where} {rest.split()[0]}: {needs_docker}")
            command = shlex.join(json.loads(rest)) if rest.startswith("[") else rest
            found.steps.append(RunStep(line, command, workdir, tuple(env.items())))
        else:
            raise TaskEnvironmentError(f"{where}: {needs_docker}")
    if bases == 0:
        raise TaskEnvironmentError("environment/Dockerfile: no FROM line")
    found.workdir = workdir if workdir != "/" else DEFAULT_WORKDIR
    found.env = env
    return found


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """(first line number, KEYWORD, arguments), continuation lines joined, comments left out."""
    found, pending, start = [], "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, rest = (pending + stripped).partition(" ")
        found.append((start, keyword.upper(), rest.strip()))
        pending = ""
    return found


def _env(rest: str, where: str) -> dict[str, str]:
    words = shlex.split(rest)
    if not words:
        raise TaskEnvironmentError(f"{where}: nothing to set")
    if "=" not in words[0]:  # the old form: ENV KEY value with spaces
        return {words[0]: rest.split(None, 1)[1].strip() if len(words) > 1 else ""}
    pairs = [word.partition("=") for word in words]
    if any(not sep for _, sep, _ in pairs):
        raise TaskEnvironmentError(f"{where}: every word must be KEY=VALUE")
    return {key: value for key, _, value in pairs}


def _copy(line: int, keyword: str, rest: str, workdir: str, context: Path, where: str) -> CopyStep:
    words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
    if any(word.startswith("--") for word in words):
        raise TaskEnvironmentError(
            f"{where} {words[0]}: flags need docker (the sandbox's files belong to its own user)"
        )
    if len(words) < 2:
        raise TaskEnvironmentError(f"{where}: needs a source and a destination")
    *sources, dest = words
    dirs = []
    for source in sources:
        if "://" in source or any(c in source for c in "*?["):
            raise TaskEnvironmentError(f"{where} {source}: only the task's own paths, no URLs or wildcards")
        if keyword == "ADD" and source.endswith(ARCHIVES):
            raise TaskEnvironmentError(f"{where} {source}: ADD unpacks archives only on docker")
        path = (context / source).resolve()
        if not path.is_relative_to(context.resolve()) or not path.exists():
            raise TaskEnvironmentError(f"{where} {source}: not a file in environment/")
        dirs.append(path.is_dir())
    full = posixpath.normpath(posixpath.join(workdir, dest))
    if len(sources) > 1 and not dest.endswith("/"):
        raise TaskEnvironmentError(f"{where}: several sources need a destination ending in /")
    return CopyStep(line, tuple(sources), tuple(dirs), full.rstrip("/") + "/" if dest.endswith("/") else full)


def prepare(sandbox: Sandbox, task: Task, found: HostEnvironment) -> None:
    """Apply the steps in the new sandbox, in order, each its own command; a failing one is a
    TaskEnvironmentError naming its line."""
    if not found.steps:
        return
    stage = f"/tmp/.hermetic-{uuid.uuid4().hex}"  # unguessable: nothing the agent left there is used
    timeout = task.config.environment.build_timeout_sec
    if found.context is not None and any(isinstance(s, CopyStep) for s in found.steps):
        sandbox.upload(found.context, stage)
    for step in found.steps:
        if isinstance(step, CopyStep):
            command = _copy_command(f"{stage}/{found.context.name if found.context else ''}", step)
        else:
            env = "".join(shlex.quote(f"{k}={v}") + " " for k, v in step.env)
            workdir = shlex.quote(step.workdir)
            command = f"mkdir -p {workdir} && cd {workdir} && env {env}sh -c {shlex.quote(step.command)}"
        _step(sandbox, command, timeout, f"environment/Dockerfile line {step.line}")
    _step(sandbox, f"rm -rf {stage} && mkdir -p {shlex.quote(found.workdir)}", timeout, "the set-up")


def _copy_command(context: str, step: CopyStep) -> str:
    """Docker's COPY: a directory's contents into the destination; a file into a destination that is
    (or ends in /, or has several sources) a directory, else as that name."""
    dest = shlex.quote(step.dest)
    parts = []
    for source, is_dir in zip(step.sources, step.dirs, strict=True):
        staged = shlex.quote(f"{context}/{source.rstrip('/')}")
        if is_dir:
            parts.append(f"mkdir -p {dest} && cp -a {staged}/. {dest}")
        elif step.dest.endswith("/"):
            parts.append(f"mkdir -p {dest} && cp -a {staged} {dest}")
        else:
            parent = shlex.quote(posixpath.dirname(step.dest) or "/")
            parts.append(f"mkdir -p {parent} && cp -a {staged} {dest}")
    return " && ".join(parts)


def _step(sandbox: Sandbox, command: str, timeout: float, what: str) -> None:
    ran = sandbox.run(command, session="setup", timeout=timeout)
    if ran.get("timed_out"):
        raise TaskEnvironmentError(f"{what} ran past the build timeout of {timeout:g}s in the sandbox")
    if ran.get("exit_code") != 0:
        tail = str(ran.get("output", "")).strip()[-600:]
        raise TaskEnvironmentError(f"{what} exited {ran.get('exit_code')} in the sandbox: {tail}")
