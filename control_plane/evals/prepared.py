"""Each task's sandbox: the spec an attempt's sandbox is made from, on each backend."""

from __future__ import annotations

from backends import Backend, SandboxSpec
from backends.docker import DockerBackend
from backends.local import LocalBackend
from backends.ssh import SSHBackend

from .environment import TaskEnvironmentError, task_image
from .host_environment import HostEnvironment, host_environment
from .task import Task

SETUP_TIMEOUT = 60.0


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
    else:
        raise TaskEnvironmentError(
            f"the {backend.name} backend cannot run a task yet: use --backend docker, local or ssh"
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
