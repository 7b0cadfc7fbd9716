"""Each task's environment, prepared once per run, and the fork every attempt starts from.

On docker the prepared environment is the task's image (built once, cached by content hash): each
attempt's container is a copy-on-write fork of it. On local, ssh and modal there is no task image,
so the Dockerfile's set-up steps run once, in a sandbox of their own, which is then snapshotted
(backends/snapshots.py); every attempt starts from that snapshot. Local and ssh snapshots hold the
workspace only, so what the set-up left outside the workdir (new entries at /, in /tmp, in the home)
rides along as an archive in the snapshot's workspace, unpacked (and removed) before the agent
starts; a Modal snapshot is the whole filesystem."""

from __future__ import annotations

import logging
import shlex
import threading
import uuid
from dataclasses import dataclass

from backends import Backend, Sandbox, SandboxError, SandboxSpec
from backends.docker import DockerBackend
from backends.local import LocalBackend
from backends.modal import ModalBackend
from backends.ssh import SSHBackend

from .environment import DEFAULT_IMAGE, TaskEnvironmentError, task_image
from .host_environment import HostEnvironment, host_environment, prepare
from .task import Task

log = logging.getLogger("hermetic.evals")

SETUP_TIMEOUT = 60.0
OUTSIDE = ("/", "/tmp", "$HOME")
"""Where a set-up step may leave files outside the workdir in a sandbox with a root of its own."""


@dataclass(frozen=True)
class Prepared:
    """A task's environment, ready: the spec of every attempt's sandbox (on local and ssh one started
    from the set-up's snapshot), the workdir, and the archive of what the set-up left outside it."""

    spec: SandboxSpec
    workdir: str
    archive: str | None = None
    steps: HostEnvironment | None = None
    """Set-up to run in the attempt's own sandbox: a task with one attempt to run has no snapshot made."""

    def start(self, sandbox: Sandbox, task: Task) -> None:
        """Run the set-up or put back what it left outside the workdir, before the agent starts."""
        if self.steps is not None:
            prepare(sandbox, task, self.steps)
        if self.archive is None:
            return
        archive = shlex.quote(self.archive)
        ran = sandbox.run(
            f"tar -xpf {archive} -C / && rm -f {archive}", session="setup", timeout=SETUP_TIMEOUT
        )
        if ran.get("exit_code") != 0:
            raise TaskEnvironmentError(
                f"the set-up's files outside the workdir: {ran.get('output', '')[-400:]}"
            )


class Environments:
    """Each task's environment, prepared on its first attempt's need and kept for the run; a task whose
    environment cannot be had is refused once, with the same reason for every attempt. `close` removes
    the snapshots."""

    def __init__(self, backend: Backend, labels: dict[str, str], network_full: bool, owner: str) -> None:
        self.backend = backend
        self.labels = labels
        self.network_full = network_full
        self.owner = owner
        """The snapshots' owner (the run's label), so retention counts them apart from sessions'."""
        self._ready: dict[str, Prepared | str] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._snapshots: list[str] = []
        self._expected: dict[str, int] = {}

    def expect(self, attempts: dict[str, int]) -> None:
        """How many attempts of each task the run has still to make (a snapshot pays from two on)."""
        self._expected = dict(attempts)

    def prepare(self, task: Task) -> Prepared:
        """The task's environment; TaskEnvironmentError (cached), SandboxError (tried again next time)."""
        with self._guard:
            lock = self._locks.setdefault(task.id, threading.Lock())
        with lock:
            found = self._ready.get(task.id)
            if found is None:
                try:
                    found = self._prepare(task)
                except TaskEnvironmentError as exc:
                    found = str(exc)
                self._ready[task.id] = found
        if isinstance(found, str):
            raise TaskEnvironmentError(found)
        return found

    def _prepare(self, task: Task) -> Prepared:
        spec, workdir, host = task_spec(self.backend, task, self.network_full, self.labels)
        if host is None or not host.steps:
            return Prepared(spec, workdir)
        if self._expected.get(task.id, 1) < 2:
            return Prepared(spec, workdir, steps=host)
        with self.backend.create(spec) as sandbox:
            whole = isinstance(self.backend, ModalBackend)  # its snapshot is the whole filesystem
            before = set() if whole else _outside(sandbox)
            prepare(sandbox, task, host)
            added = [] if whole else sorted(_outside(sandbox) - before)
            archive = None
            if added:
                archive = f"{workdir.rstrip('/')}/.hermetic-setup-{uuid.uuid4().hex}.tar"
                names = " ".join(shlex.quote(path.lstrip("/")) for path in added)
                packed = sandbox.run(
                    f"tar -cpf {shlex.quote(archive)} -C / -- {names}", session="setup", timeout=SETUP_TIMEOUT
                )
                if packed.get("exit_code") != 0:
                    raise TaskEnvironmentError(
                        f"the set-up's files outside the workdir ({', '.join(added)}) could not be kept: "
                        f"{packed.get('output', '')[-400:]}"
                    )
            snapshot = sandbox.snapshot(label=f"eval task {task.id}", owner=f"{self.owner}:{task.id}")
        with self._guard:
            self._snapshots.append(snapshot.id)
        log.info(
            "task %s: set-up done once, snapshot %s (outside the workdir: %s)", task.id, snapshot.id, added
        )
        return Prepared(spec.model_copy(update={"from_snapshot": snapshot.id}), workdir, archive)

    def close(self) -> None:
        """Forget every prepared environment and remove the run's snapshots."""
        with self._guard:
            snapshots, self._snapshots = self._snapshots, []
            self._ready.clear()
        for snapshot in snapshots:
            try:
                self.backend.delete_snapshot(snapshot)
            except SandboxError as exc:
                log.warning("snapshot %s of an evaluation run not removed: %s", snapshot, exc)


def _outside(sandbox: Sandbox) -> set[str]:
    """The entries at the top of each place outside the workdir that a set-up step may write."""
    places = " ".join(OUTSIDE)
    ran = sandbox.run(
        f"find {places} -mindepth 1 -maxdepth 1 2>/dev/null; true", session="setup", timeout=SETUP_TIMEOUT
    )
    return {line for line in str(ran.get("output", "")).splitlines() if line.startswith("/")}


def task_spec(
    backend: Backend, task: Task, network_full: bool, labels: dict[str, str]
) -> tuple[SandboxSpec, str, HostEnvironment | None]:
    """The attempt's sandbox: on docker the task's image with task privileges; on local and ssh the
    backend's own system with a root of its own and the task's files (host_environment.py)."""
    host = None
    if isinstance(backend, DockerBackend):
        image, workdir = task_image(backend.client, task)
        extra: dict[str, object] = {"image": image, "privileges": "task"}
    elif isinstance(backend, SSHBackend | LocalBackend):
        if isinstance(backend, LocalBackend) and backend.config.isolation != "bwrap":
            raise TaskEnvironmentError(
                "the local backend with isolation 'none' has the host's own root: a task's /tests and "
                "/logs cannot be made there; use isolation 'bwrap'"
            )
        host = host_environment(task, backend.name)
        workdir = host.workdir
        extra = {"own_root": True, "env": host.env}
    elif isinstance(backend, ModalBackend):  # Hermetic's own image, a root of its own, as root
        host = host_environment(task, backend.family)
        workdir = host.workdir
        extra = {"image": DEFAULT_IMAGE, "env": host.env}
    else:
        raise TaskEnvironmentError(
            f"the {backend.name} backend cannot run a task: use --backend docker, local, ssh or modal"
        )
    env = task.config.environment
    network, allow = "none", list(env.allow)
    if env.allow_internet:
        if allow:
            network = "allowlist"
        elif network_full:
            network = "full"
        else:
            raise TaskEnvironmentError(
                "task.toml: allow_internet = true with no [environment] allow list; "
                "name its hosts there, or pass --network full to let it out"
            )
    timeouts = task.config.agent.timeout_sec + task.config.verifier.timeout_sec
    spec = SandboxSpec(
        **extra,  # type: ignore[arg-type]
        workdir=workdir,
        cpus=env.cpus,
        memory=f"{env.memory_mb}m",
        disk=f"{min(env.storage_mb, 2048)}m",
        pids=1024,
        network=network,  # type: ignore[arg-type]
        allow=allow if network == "allowlist" else [],
        labels={**labels, "org.hermetic.task": task.id},
        ttl=int(timeouts + 4 * SETUP_TIMEOUT + (task.config.environment.build_timeout_sec if host else 0)),
    )
    return spec, workdir, host
