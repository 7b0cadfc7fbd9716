"""Docker backend: a hardened container per sandbox whose main process (under docker's init) is the
runtime, spoken to over the container's attach stream.

Attach, not exec: the attach request has no body, so a Docker socket proxy that cannot upgrade a request
with a body (Debian's HAProxy 2.6, compose/docker-proxy.cfg) still carries it, and a proxy can refuse
every exec. The container is created with stdin open once (StdinOnce): when the stream ends, the
runtime reads EOF and the container stops, as an exec'd runtime did; the next use starts it again, its
workspace volume kept. The container's log driver is `none`: the stream never lands in dockerd's logs.
"""

from __future__ import annotations

import io
import logging
import os
import socket
import tarfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import LogConfig, Mount
from pydantic import BaseModel, ConfigDict

from sandboxes import code_hash

from .base import MANAGED_LABEL, Backend, Sandbox, new_sandbox_id
from .bundle import BOOTSTRAP, bootstrap_payload
from .channel import Channel, FramedSocketTransport
from .docker_client import docker_client
from .docker_volumes import (
    SNAPSHOT_LABEL,
    STORE_LABEL,
    CopyHelper,
    SpareHelper,
    copy_volume,
    reap_orphaned_snapshots,
    remove_volume,
    snapshot_labels,
)
from .errors import BackendUnavailable, UnsupportedSpec
from .freezer import ApiPause, CgroupFreezer, Pause
from .network import SANDBOX_INGRESS_DIR, SANDBOX_NET_DIR, SYSTEM_CA_FILE, Egress, forget, open_ingress
from .snapshots import Snapshot, new_snapshot_id
from .spec import SandboxSpec
from .stats import cgroup_dirs_of

log = logging.getLogger("hermetic.backends.docker")

SANDBOX_LABEL = "org.hermetic.sandbox"
OWNER_LABEL = "org.hermetic.owner"
EXPIRES_LABEL = "org.hermetic.expires"
RUNTIME_HASH_LABEL = "org.hermetic.runtime-hash"
HOME_TMPFS = "rw,nosuid,nodev,size=268435456,uid={uid},gid={gid},mode=0755"
SANDBOX_UID = 1000
NET_VOLUME_DIR = "/run/hermetic-net"
"""Where a sandbox sees DockerConfig.net_volume (its own directory in it is named in its environment)."""
OWNER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
"""host:pid:run. The run tells this process from an earlier one with the same pid on the same host: in a
container the control plane is pid 1 after every restart, and its predecessor's sandboxes are orphans."""


class DockerConfig(BaseModel):
    """The Docker backend's settings."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["docker"] = "docker"
    base_url: str | None = None
    """Docker endpoint; default: DOCKER_HOST or the local socket."""
    build_missing_image: bool = True
    """Build `hermetic-sandbox:<variant>` offline (images/build.py) when it is not present."""
    net_volume: str | None = None
    """A named volume holding the sockets of network allowlists and exposed ports, mounted at
    ~/.hermetic/net in this process's own container and at /run/hermetic-net in each sandbox: for a
    control plane in a container that reaches dockerd over tcp:// (the compose deployment), where no
    directory of its own can be bind-mounted. Unset: dockerd on this machine, directories bind-mounted."""

    def build(self) -> DockerBackend:
        return DockerBackend(self)


class DockerBackend(Backend):
    name = "docker"
    task_privileges = True

    def __init__(self, config: DockerConfig | None = None) -> None:
        self.config = config or DockerConfig()
        try:
            self.client = docker_client(self.config.base_url)
            self.client.ping()
        except DockerException as exc:
            raise BackendUnavailable(
                f"dockerd is not reachable ({exc}); start it (`dockerd &` or `systemctl start docker`) "
                "or set DOCKER_HOST"
            ) from exc
        self._runtime_hashes: dict[str, str] = {}
        self._ca_files: dict[str, bytes | None] = {}
        endpoint = self.config.base_url or os.environ.get("DOCKER_HOST") or "unix://"
        self.local_daemon = endpoint.startswith("unix://")
        """Whether dockerd shares this machine's filesystem, so a host directory can be bind-mounted."""
        self.net_volume = self.config.net_volume
        if self.net_volume and os.getuid() == SANDBOX_UID:
            raise BackendUnavailable(
                f"docker.net_volume needs this process to run as another user than the sandboxes' (uid "
                f"{SANDBOX_UID}): they would own the volume's directories and could list them"
            )
        self.doors = self.net_volume is not None or self.local_daemon
        """Whether sandboxes get the sockets of a network allowlist and of exposed ports: bind-mounted
        from this machine, or in the shared volume. Behind a socket proxy without one, neither."""
        self.reap()

    def create(self, spec: SandboxSpec) -> DockerSandbox:
        if spec.network == "allowlist" and not self.doors:
            raise UnsupportedSpec(
                "network allowlist on docker needs dockerd on this machine (DOCKER_HOST is not a unix "
                "socket) or docker.net_volume: the egress socket reaches the sandbox through either"
            )
        if spec.credentials and self.net_volume:
            raise UnsupportedSpec(
                "egress credentials on docker need dockerd on this machine: the sandbox CA is bound over "
                "the image's CA file, a file the shared docker.net_volume cannot mount alone"
            )
        if spec.workspace and not self.local_daemon:
            raise UnsupportedSpec(
                "a host directory as the workspace needs dockerd on this machine (DOCKER_HOST is not a "
                "unix socket): it is bind-mounted from here"
            )
        self.ensure_image(spec.image)
        return self.opened(DockerSandbox(self, new_sandbox_id(), spec))

    def ensure_image(self, image: str) -> str:
        """The image's id; a missing hermetic-sandbox image is built first (when the config allows)."""
        try:
            image_id: str = self.client.images.get(image).id
            return image_id
        except ImageNotFound:
            pass
        repo, _, variant = image.partition(":")
        if repo != "hermetic-sandbox" or not self.config.build_missing_image:
            raise BackendUnavailable(
                f"image {image} is not present and cannot be pulled here; "
                "build it with `hermetic image build`"
            )
        from images.build import ensure_image  # building needs debootstrap: only when missing

        log.warning("image %s is missing; building it offline (about a minute)", image)
        ensure_image(variant or "slim", client=self.client)
        built: str = self.client.images.get(image).id
        return built

    def drop_snapshot_copy(self, snapshot: Snapshot) -> None:
        remove_volume(self.client, snapshot.location["volume"])

    def runtime_hash(self, image: str) -> str:
        """The runtime code hash an image was built with (its label), cached per image."""
        if image not in self._runtime_hashes:
            labels = self.client.images.get(image).labels or {}
            self._runtime_hashes[image] = labels.get(RUNTIME_HASH_LABEL, "")
        return self._runtime_hashes[image]

    def system_ca_file(self, image: str) -> bytes | None:
        """The image's own SYSTEM_CA_FILE (None when it has none), read from a container created and
        removed for it, never started; cached per image."""
        if image not in self._ca_files:
            created = self.client.api.create_container(image, command=["true"], labels={MANAGED_LABEL: "1"})
            try:
                stream, _ = self.client.api.get_archive(created["Id"], SYSTEM_CA_FILE)
                with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
                    member = tar.next()
                    found = tar.extractfile(member) if member is not None else None  # None: a link
                    self._ca_files[image] = found.read() if found is not None else None
            except NotFound:
                self._ca_files[image] = None
            finally:
                _quietly(lambda: self.client.api.remove_container(created["Id"], force=True))
        return self._ca_files[image]

    def reap(self) -> int:
        """Remove containers and volumes of dead control planes on this host, past their ttl, or stopped."""
        removed = 0
        now = time.time()
        # sparse: the list's own fields suffice, no inspect per container
        for container in self.client.containers.list(all=True, sparse=True, filters={"label": MANAGED_LABEL}):
            labels = container.attrs.get("Labels") or {}
            expired = float(labels.get(EXPIRES_LABEL, "inf")) < now
            owner = labels.get(OWNER_LABEL, "")
            # A stopped container of a live owner is that owner's to restart (its runtime ended: the
            # next call recovers it) or to remove; one with no owner nobody will come back for.
            stopped = container.status in ("exited", "dead") and not owner
            if expired or stopped or _owner_dead(owner):
                name = labels.get(SANDBOX_LABEL) or container.id
                _quietly(lambda name=name: self.client.api.remove_container(name, force=True))
                if labels.get(SANDBOX_LABEL):
                    forget(labels[SANDBOX_LABEL])  # its socket directories; the audit log stays
                removed += 1
        for volume in self.client.volumes.list(filters={"label": MANAGED_LABEL}):
            owner = (volume.attrs.get("Labels") or {}).get(OWNER_LABEL, "")
            if _owner_dead(owner):
                _quietly(volume.remove)  # refused while a live container still uses it
        snapshots = reap_orphaned_snapshots(self.client)
        if removed or snapshots:
            log.info("reaped %d orphaned sandbox containers, %d snapshot volumes", removed, snapshots)
        return removed


class DockerSandbox(Sandbox):
    backend = "docker"

    def __init__(self, backend: DockerBackend, sandbox_id: str, spec: SandboxSpec) -> None:
        super().__init__(sandbox_id, spec)
        self._backend = backend
        self._client = backend.client
        self.container_id: str | None = None
        self._fresh = True
        """Whether the image's runtime is current; else the container's command is the bootstrap, and
        the current runtime is sent down the stream each time it starts."""
        self.volume_name = f"{sandbox_id}-workspace"
        self.paused_seconds = 0.0
        """How long the last snapshot or fork kept the container paused."""
        self._pid: int | None = None
        self.between_passes: Callable[[], None] | None = None
        """Called between the copy's two passes, the container still running (tests change it there)."""
        self._spare: SpareHelper | None = None
        self._ahead: CopyHelper | None = None
        """The spare taken for the snapshot being taken (under `_copying`)."""
        self.labels = {**spec.labels, MANAGED_LABEL: "1", SANDBOX_LABEL: sandbox_id, OWNER_LABEL: OWNER}
        if spec.ttl:
            self.labels[EXPIRES_LABEL] = str(int(time.time() + spec.ttl))

    # Calls address the container by its name (the sandbox id), never its id: a Docker socket proxy
    # (compose/docker-proxy.cfg) can then confine the control plane to hm-* containers.
    @property
    def container(self) -> Any:
        """The container as a docker SDK object (one inspect call)."""
        return self._client.containers.get(self.id)

    def cgroup_dirs(self) -> dict[str, Path]:
        """From /proc/PID/cgroup of the container's first process (cached: it changes only on a restart)."""
        if self._pid is None or not Path(f"/proc/{self._pid}").exists():
            try:
                self._pid = int(self._client.api.inspect_container(self.id)["State"]["Pid"]) or None
            except DockerException:
                return {}
        return cgroup_dirs_of(self._pid) if self._pid else {}

    def _provision(self) -> None:
        """Create and start the container with the low-level API: `containers.run` adds an inspect
        call, and a separate volume create adds another, for nothing."""
        spec = self.spec
        task = spec.privileges == "task"  # an evaluation task's image: its user, default capabilities
        if spec.workspace:  # a host directory (an editor's project): bind-mounted, never removed
            mounts = [Mount(spec.workdir, spec.workspace, type="bind", read_only=False)]
        elif task:
            # A task's workdir stays in the image's writable layer, as the task built it: no volume to
            # create, fill from the image and remove per attempt (so no snapshots of such a sandbox).
            mounts = []
        else:
            mounts = [Mount(spec.workdir, self.volume_name, type="volume", labels=self.labels)]
        mounts += [Mount(m.target, m.source, type="bind", read_only=m.read_only) for m in spec.mounts]
        mounts += self._doors()
        env = spec.given_env()
        env.update(
            HERMETIC_WORKSPACE=spec.workdir,
            HERMETIC_ROOTS=f"{spec.workdir}:/tmp",
            HERMETIC_OUTPUT_LIMIT=str(spec.output_limit),
            **(self.egress.env if self.egress is not None else {}),
            **(self.ingress.env if self.ingress is not None else {}),
        )
        uid, gid = _owner(spec.workspace)
        tmpfs = {"/tmp": f"rw,nosuid,nodev,size={spec.disk_bytes},mode=1777"}
        if task:
            env.update(HERMETIC_ROOTS="/", HOME="/root")
        else:
            tmpfs["/home/sandbox"] = HOME_TMPFS.format(uid=uid, gid=gid)
        api = self._client.api
        host_config = api.create_host_config(
            init=True,  # reaps zombies: every browser close would otherwise leave some
            cap_drop=None if task else ["ALL"],
            security_opt=["no-new-privileges"],
            read_only=not task,
            tmpfs=tmpfs,
            mounts=mounts,
            network_mode="bridge" if spec.network == "full" else "none",
            pids_limit=spec.pids,
            mem_limit=spec.memory_bytes,
            memswap_limit=spec.memory_bytes,
            nano_cpus=int(spec.cpus * 1e9),
            log_config=LogConfig(type=LogConfig.types.NONE),
        )
        self._fresh = self._backend.runtime_hash(spec.image) == code_hash()
        created = api.create_container(
            spec.image,
            command=["python3", "-m", "sandboxes"] if self._fresh else ["python3", "-c", BOOTSTRAP],
            name=self.id,
            stdin_open=True,  # with detach=False (the default): StdinOnce, so the stream's end is EOF
            hostname="sandbox",
            user=None if task else f"{uid}:{gid}",
            environment=env,
            working_dir=spec.workdir,
            labels=self.labels,
            host_config=host_config,
        )
        self.container_id = created["Id"]

    def _doors(self) -> list[Mount]:
        """The mounts of the sandbox's sockets (egress on network allowlist, ingress when the backend
        offers it), opened first: the whole shared volume, or each directory bind-mounted."""
        volume = self._backend.net_volume
        if self.spec.network == "allowlist" and self.egress is None:
            self.egress = Egress.attach(
                self.id, self.spec.allow, self.spec.credentials, volume_at=NET_VOLUME_DIR if volume else None
            )
        if self.ingress is None and self._backend.doors:
            self.ingress = open_ingress(self.id, volume_at=NET_VOLUME_DIR if volume else None)
        if volume:  # no_copy: nothing of the image's is ever copied into it
            return [Mount(NET_VOLUME_DIR, volume, type="volume", no_copy=True)]
        mounts = []
        if self.egress is not None:  # the container stays on network none: the socket is the way out
            mounts.append(Mount(SANDBOX_NET_DIR, str(self.egress.socket_dir), type="bind", read_only=True))
            system = self._backend.system_ca_file(self.spec.image) if self.egress.credentials else None
            store = self.egress.trust_store(system) if system is not None else None
            if store is not None:  # the image's own bundle plus the sandbox CA, over the image's
                mounts.append(Mount(SYSTEM_CA_FILE, str(store), type="bind", read_only=True))
        if self.ingress is not None:
            mounts.append(Mount(SANDBOX_INGRESS_DIR, str(self.ingress.dir), type="bind", read_only=False))
        return mounts

    def _connect(self) -> Channel:
        """Attach to the (created or stopped) container, then start it: nothing it says is missed."""
        api = self._client.api
        sock = api.attach_socket(self.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        raw = getattr(sock, "_sock", sock)
        raw.settimeout(None)
        transport = FramedSocketTransport(raw, self.id)
        api.start(self.id)
        if not self._fresh:
            log.info(
                "sandbox %s: image %s has an older runtime; sending the current one", self.id, self.spec.image
            )
            transport.send(bootstrap_payload())
        channel = Channel(transport, f"docker sandbox {self.id}")
        channel.handshake()
        return channel

    def _recover(self) -> str:
        try:
            status = self.container.status
        except NotFound:
            status = "gone"
        if status != "gone":
            # The runtime (the container's main process) ended with its stream: wait until docker says
            # the container stopped, so the start in _connect is not refused as "already running".
            _quietly(lambda: self._client.api.stop(self.id, timeout=5))
            return (
                "the sandbox's runtime stopped and was restarted: "
                "shell sessions and background processes were lost"
            )
        kept = self._volume_exists()
        self._provision()
        return (
            "the sandbox's container vanished and a new one was created: shell sessions and background "
            "processes were lost; " + ("the workspace was kept" if kept else "the workspace was lost too")
        )

    # -- snapshots: workspace volumes copied by a helper container (backends/docker_volumes.py) --

    def prepare_snapshots(self) -> None:
        """Make a copy helper ahead for the next snapshot, in the background, unless one is made or
        being made. Not again at once after a snapshot took it: its making would compete with the work
        going on then; the agent asks again when the turn is over."""
        if self.spec.privileges == "task" or self.spec.workspace:
            return  # no workspace volume: no snapshots
        with self._lock:
            if self._closed:
                return
            if self._spare is None:
                self._spare = SpareHelper(lambda: self._helper(new_snapshot_id()))
            spare = self._spare
        spare.refill()

    def helper_ahead(self) -> str | None:
        """The snapshot id the copy helper made ahead is for, once it is up (None: no helper is kept):
        for tests and benchmarks that measure a sandbox whose helper is ready."""
        helper = self._spare.ready() if self._spare is not None else None
        return helper.labels[SNAPSHOT_LABEL] if helper is not None else None

    def _snapshot_id(self) -> str:
        if self._ahead is not None:  # left by a snapshot that failed before its copy
            self._ahead.discard()
        self._ahead = self._spare.take(self._current) if self._spare is not None else None
        return self._ahead.labels[SNAPSHOT_LABEL] if self._ahead is not None else new_snapshot_id()

    def _current(self, helper: CopyHelper) -> bool:
        """Whether a helper made ahead still labels its volume with the registry in use (tests swap it)."""
        return helper.labels[STORE_LABEL] == str(self._backend.snapshots.root.resolve())

    def _helper(self, snapshot_id: str) -> CopyHelper:
        """A started copy helper for snapshot `snapshot_id` of this workspace, waiting for its word."""
        store = self._backend.snapshots.root
        labels = snapshot_labels(snapshot_id, self.id, store, self.spec.labels)
        return CopyHelper(self._client, self.spec.image, self.volume_name, f"hm-{snapshot_id}", labels)

    def _save_workspace(self, snapshot_id: str) -> tuple[dict[str, str], int]:
        if self.spec.privileges == "task":
            raise UnsupportedSpec(
                "a task's sandbox keeps its workdir in the image's layer: it has no snapshots"
            )
        helper, self._ahead = self._ahead, None
        if helper is None or helper.labels[SNAPSHOT_LABEL] != snapshot_id:
            if helper is not None:
                helper.discard()
            helper = self._helper(snapshot_id)
        size, self.paused_seconds = helper.copy(pause=self._pause(), after_bulk=self.between_passes)
        return {"volume": helper.dest}, size

    def _seed_workspace(self, location: dict[str, str]) -> None:
        copy_volume(self._client, self.spec.image, location["volume"], self.volume_name, self.labels)

    def _fork_workspace(self) -> DockerSandbox:
        if self.spec.privileges == "task":
            raise UnsupportedSpec("a task's sandbox keeps its workdir in the image's layer: it cannot fork")
        child = DockerSandbox(
            self._backend, new_sandbox_id(), self.spec.model_copy(update={"from_snapshot": None})
        )
        _, self.paused_seconds = copy_volume(
            self._client, self.spec.image, self.volume_name, child.volume_name, child.labels, self._pause()
        )
        return self._backend.opened(child)  # its container mounts the copied volume

    def _pause(self) -> Pause:
        """Its cgroup's freezer where this process may write it, else `docker pause` (freezer.py)."""
        return CgroupFreezer.of(self.cgroup_dirs()) or ApiPause(self._client, self.id)

    def _volume_exists(self) -> bool:
        try:
            self._client.volumes.get(self.volume_name)
            return True
        except NotFound:
            return False

    def _destroy(self) -> None:
        if self._spare is not None:
            self._spare.close()
        if self.container_id is not None:
            _quietly(lambda: self._client.api.remove_container(self.id, force=True))
        if self.spec.privileges != "task":
            remove_volume(self._client, self.volume_name)  # once the copy helpers mounting it are gone
        if self.egress is not None:
            self.egress.close()
        if self.ingress is not None:
            self.ingress.close()


def _owner_dead(owner: str) -> bool:
    host, pid, run = (owner.split(":") + ["", ""])[:3]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return run != OWNER.rsplit(":", 1)[1]  # our pid, another run: a predecessor of this process
    try:
        os.kill(int(pid), 0)
        return False
    except ProcessLookupError:
        return True
    except PermissionError:
        return False


def _quietly(action: Any) -> None:
    """Run a removal that may find its target already gone."""
    try:
        action()
    except (NotFound, APIError) as exc:
        log.debug("ignored: %s", exc)


def _owner(workspace: str | None) -> tuple[int, int]:
    """Who the container runs as: the owner of a bind-mounted workspace (so the user's files stay the
    user's), else the image's sandbox user; never root."""
    if workspace:
        info = os.stat(workspace)
        if info.st_uid != 0:
            return info.st_uid, info.st_gid
    return SANDBOX_UID, SANDBOX_UID
