"""Modal backend: a Modal Sandbox per sandbox, the runtime spoken to over one exec's stdin/stdout."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol, cast

from pydantic import BaseModel, ConfigDict, Field

from .base import MANAGED_LABEL, Backend, Sandbox, new_sandbox_id
from .bundle import BOOTSTRAP, bootstrap_payload
from .channel import Channel, PumpedStream, Transport, runtime_log
from .errors import BackendUnavailable, SandboxError, UnsupportedSpec
from .local import RUNTIME_DIR
from .network.presets import expand
from .snapshots import Snapshot
from .spec import SandboxSpec

log = logging.getLogger("hermetic.backends.modal")

SANDBOX_TAG = "org.hermetic.sandbox"
OWN_IMAGE = "hermetic-sandbox"  # spec images named hermetic-sandbox:<variant> mean "Hermetic's own image"
DOCKERFILE = RUNTIME_DIR.parent / "images" / "Dockerfile"  # build context: the dir holding sandboxes/
MODAL_MAX_TIMEOUT = 24 * 3600  # Modal's longest sandbox lifetime
# The sandbox's own command: it only has to last; the runtime is a separate exec. Explicit, so a registry
# image's CMD (often a REPL that exits at once without stdin) cannot end the sandbox.
ENTRYPOINT = ("sleep", "infinity")
# Each write is drained on its own; Modal's stdin buffer refuses more than 2 MiB (server path) before a drain.
WRITE_CHUNK = 1 << 20
_DOMAIN = re.compile(r"^(\*\.)?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*$")


# -- the part of Modal's SDK this backend uses (the real classes, or a stand-in in tests) -------------


class StreamWriter(Protocol):
    def write(self, data: bytes) -> None: ...
    def write_eof(self) -> None: ...
    def drain(self) -> None: ...


class ContainerProcess(Protocol):
    @property
    def stdin(self) -> StreamWriter: ...
    @property
    def stdout(self) -> Iterable[bytes]: ...
    @property
    def stderr(self) -> Iterable[bytes]: ...


class SandboxHandle(Protocol):
    @property
    def object_id(self) -> str: ...
    def exec(self, *args: str, **kwargs: Any) -> ContainerProcess: ...
    def poll(self) -> int | None: ...
    def terminate(self) -> None: ...
    def snapshot_filesystem(self) -> Any: ...


class SandboxAPI(Protocol):
    def create(self, *args: str, **kwargs: Any) -> SandboxHandle: ...


AppLookup = Callable[[str], Any]


class ModalConfig(BaseModel):
    """The Modal backend's settings. Credentials come from `modal token new` (~/.modal.toml) or
    MODAL_TOKEN_ID / MODAL_TOKEN_SECRET, as for every Modal client."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["modal"] = "modal"
    app_name: str = "hermetic"
    """The Modal App the sandboxes belong to; created on first use."""
    image: str | None = None
    """A registry image (e.g. ghcr.io/you/hermetic-sandbox:slim, built from images/Dockerfile) used when a
    spec asks for Hermetic's own `hermetic-sandbox:<variant>`. Default: Modal builds images/Dockerfile
    itself (once; later sandboxes hit Modal's image cache). Any image works if it has python3 >= 3.9."""
    region: str | list[str] | None = None
    """Modal region(s) to run in, e.g. "us-east"; default: Modal chooses."""
    cloud: str | None = None
    """Cloud provider, e.g. "aws" or "gcp"; default: Modal chooses."""
    timeout: int = Field(3600, gt=0, le=MODAL_MAX_TIMEOUT)
    """Lifetime in seconds of a sandbox whose spec sets no ttl; Modal terminates it afterwards, so a
    sandbox a crashed control plane left behind costs at most this long."""
    idle_timeout: int | None = Field(None, gt=0)
    """Seconds without activity after which Modal terminates the sandbox; default: never."""
    handshake_timeout: float = Field(120.0, gt=0)
    """Seconds to wait for the runtime's first answer: covers Modal scheduling a sandbox, a cold image."""

    def build(self) -> ModalBackend:
        return ModalBackend(self)


def _real_modal() -> tuple[SandboxAPI, AppLookup]:
    """modal.Sandbox and an App lookup; raises BackendUnavailable when no credentials are configured."""
    import modal
    from modal.config import config as modal_config

    if not (modal_config.get("token_id") and modal_config.get("token_secret")):
        raise BackendUnavailable(
            "no Modal credentials: run `modal token new`, or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"
        )

    def lookup(name: str) -> Any:
        return modal.App.lookup(name, create_if_missing=True)

    return cast(SandboxAPI, modal.Sandbox), lookup


class ModalBackend(Backend):
    """Sandboxes on Modal. `sandbox_api` and `app_lookup` default to the real SDK; tests inject a stand-in
    for the two things that need Modal's service, everything else (images, the channel) is the real code."""

    name = "modal"

    def __init__(
        self,
        config: ModalConfig | None = None,
        *,
        sandbox_api: SandboxAPI | None = None,
        app_lookup: AppLookup | None = None,
    ) -> None:
        self.config = config or ModalConfig()
        if sandbox_api is None:
            sandbox_api, real_lookup = _real_modal()
            app_lookup = app_lookup or real_lookup
        self.sandbox_api = sandbox_api
        self._app_lookup = app_lookup
        self._app: Any = None
        self._images: dict[str, Any] = {}
        self._lock = threading.Lock()

    def create(self, spec: SandboxSpec) -> ModalSandbox:
        if spec.mounts:
            raise UnsupportedSpec(
                "host mounts cannot reach a Modal sandbox; upload files with Sandbox.upload instead"
            )
        if spec.ttl and spec.ttl > MODAL_MAX_TIMEOUT:
            raise UnsupportedSpec(f"Modal sandboxes live at most {MODAL_MAX_TIMEOUT} s; ttl was {spec.ttl}")
        network_kwargs(spec)  # refuse a bad allowlist before anything is created
        if spec.credentials:  # Modal enforces its own allowlist: no proxy of ours to add a header
            raise UnsupportedSpec(
                "sandbox.credentials need Hermetic's egress proxy: the local or docker backend"
            )
        return self.opened(ModalSandbox(self, new_sandbox_id(), spec))

    @property
    def family(self) -> str:
        return "modal"  # also for a subclass named otherwise (the tests' stand-in)

    def drop_snapshot_copy(self, snapshot: Snapshot) -> None:
        """Nothing to remove here: Modal keeps a snapshot's image and expires it on its own."""

    def app(self) -> Any:
        """The Modal App, looked up (and created if missing) once."""
        with self._lock:
            if self._app is None and self._app_lookup is not None:
                self._app = self._app_lookup(self.config.app_name)
            return self._app

    def image(self, name: str) -> Any:
        """The modal.Image for a spec's image name (lazy: Modal resolves or builds it at create)."""
        import modal

        with self._lock:
            if name not in self._images:
                repo, _, variant = name.partition(":")
                if name.startswith("im-"):  # an id from snapshot()
                    image = modal.Image.from_id(name)
                elif repo == OWN_IMAGE and self.config.image:
                    image = modal.Image.from_registry(self.config.image)
                elif repo == OWN_IMAGE:
                    image = modal.Image.from_dockerfile(
                        DOCKERFILE,
                        context_dir=DOCKERFILE.parent.parent,
                        build_args={"VARIANT": variant or "slim"},
                        ignore=["**/__pycache__", "**/*.pyc"],
                    )
                else:
                    image = modal.Image.from_registry(name)
                self._images[name] = image
            return self._images[name]

    def create_kwargs(self, spec: SandboxSpec, sandbox_id: str) -> dict[str, Any]:
        """What `modal.Sandbox.create` gets for a spec."""
        env = spec.given_env()
        mib = max(spec.memory_bytes >> 20, 1)
        kwargs: dict[str, Any] = {
            "app": self.app(),
            "image": self.image(spec.image),
            "env": env,
            "workdir": spec.workdir,
            "timeout": spec.ttl or self.config.timeout,
            "idle_timeout": self.config.idle_timeout,
            "cpu": (spec.cpus, spec.cpus),  # (request, limit): the spec's cpus is a hard limit
            "memory": (mib, mib),
            "tags": {**spec.labels, MANAGED_LABEL: "1", SANDBOX_TAG: sandbox_id},
            **network_kwargs(spec),
        }
        if self.config.region is not None:
            kwargs["region"] = self.config.region
        if self.config.cloud is not None:
            kwargs["cloud"] = self.config.cloud
        return kwargs


def network_kwargs(spec: SandboxSpec) -> dict[str, Any]:
    """Modal's network switches for a spec's policy. Raises UnsupportedSpec for an entry it cannot express."""
    if spec.network == "full":
        return {}
    if spec.network == "none" or not spec.allow:
        return {"block_network": True}
    cidrs: list[str] = []
    domains: list[str] = []
    for entry in expand(spec.allow):  # the spec refused unknown presets already
        try:
            cidrs.append(str(ipaddress.ip_network(entry, strict=False)))
        except ValueError:
            if not _DOMAIN.match(entry):
                raise UnsupportedSpec(
                    f"allowlist entry {entry!r} is neither a CIDR nor a host name (no ports or schemes)"
                ) from None
            domains.append(entry)
    kwargs: dict[str, Any] = {}
    if cidrs:
        kwargs["outbound_cidr_allowlist"] = cidrs
    if domains:
        kwargs["outbound_domain_allowlist"] = domains
    return kwargs


class ModalSandbox(Sandbox):
    backend = "modal"

    def __init__(self, backend: ModalBackend, sandbox_id: str, spec: SandboxSpec) -> None:
        super().__init__(sandbox_id, spec)
        self._backend = backend
        self.modal: SandboxHandle | None = None
        """The Modal Sandbox (a new one after the old one ended)."""

    def _provision(self) -> None:
        """Create the Modal Sandbox; its entrypoint idles, the runtime is started by `_connect`."""
        spec = self.spec
        if self.restoring is not None:  # the snapshot's image holds the workspace
            spec = spec.model_copy(update={"image": self.restoring.location["image"]})
        kwargs = self._backend.create_kwargs(spec, self.id)
        self.modal = self._backend.sandbox_api.create(*ENTRYPOINT, **kwargs)
        log.info("sandbox %s is Modal sandbox %s", self.id, self.modal.object_id)

    def _connect(self) -> Channel:
        assert self.modal is not None
        spec = self.spec
        # The runtime comes down the stream (bootstrap), so any image with python3 hosts the current
        # runtime without a rebuild. No exec timeout: per-command timeouts are the runtime's job, and an
        # exec timeout would kill the runtime itself; the sandbox's lifetime is create's `timeout`.
        process = self.modal.exec(
            "python3",
            "-c",
            BOOTSTRAP,
            workdir=spec.workdir,
            env={
                "HERMETIC_WORKSPACE": spec.workdir,
                "HERMETIC_ROOTS": f"{spec.workdir}{os.pathsep}/tmp",
                "HERMETIC_OUTPUT_LIMIT": str(spec.output_limit),
            },
            text=False,
        )
        transport = ModalStreamTransport(process, self.id)
        transport.send(bootstrap_payload())
        channel = Channel(transport, f"modal sandbox {self.id} ({self.modal.object_id})")
        channel.handshake(timeout=self._backend.config.handshake_timeout)
        return channel

    def _recover(self) -> str:
        if self.modal is not None and self.modal.poll() is None:
            return (
                "the sandbox's runtime stopped and was restarted: shell sessions and background "
                "processes were lost; the workspace was kept"
            )
        self._terminate()
        self._provision()
        return (
            "the Modal sandbox ended (terminated, or past its timeout) and a new one was created: shell "
            "sessions, background processes and the workspace were lost"
        )

    def _save_workspace(self, snapshot_id: str) -> tuple[dict[str, str], int]:
        """Modal's snapshot_filesystem: the whole filesystem as an image (its size is not reported)."""
        assert self.modal is not None
        try:
            image = self.modal.snapshot_filesystem()
        except Exception as exc:  # Modal's errors (the sandbox ended, a timeout): nothing was kept
            raise SandboxError(f"snapshot_filesystem failed: {exc}") from exc
        return {"image": str(image.object_id)}, 0

    def _seed_workspace(self, location: dict[str, str]) -> None:
        """Nothing: the sandbox was created from the snapshot's image (see _provision)."""

    def _terminate(self) -> None:
        if self.modal is not None:
            try:
                self.modal.terminate()
            except Exception as exc:  # already gone, or Modal unreachable: its timeout ends it anyway
                log.warning("sandbox %s: terminate failed: %s", self.id, exc)

    def _destroy(self) -> None:
        self._terminate()


class ModalStreamTransport(Transport):
    """A Modal exec's stdin (StreamWriter: write, then drain) and stdout (bytes chunks) as a Transport."""

    def __init__(self, process: ContainerProcess, label: str) -> None:
        self._stdin = process.stdin
        self._stdout = PumpedStream(process.stdout, label)  # a blocking iterator, no timeout
        # drain() sends the buffer and clears it afterwards: a write from another thread while a drain is in
        # flight would be cleared unsent. So each write+drain pair holds this lock.
        self._write_lock = threading.Lock()
        self._closed = False
        threading.Thread(
            target=_log_stderr, args=(process.stderr, label), name=f"stderr-{label}", daemon=True
        ).start()

    def send(self, data: bytes) -> None:
        with self._write_lock:
            if self._closed:
                raise OSError("stream closed")
            try:
                for offset in range(0, max(len(data), 1), WRITE_CHUNK):
                    self._stdin.write(data[offset : offset + WRITE_CHUNK])
                    self._stdin.drain()
            except OSError:
                raise
            except Exception as exc:  # Modal's errors: the channel treats OSError as "stream gone"
                raise OSError(f"writing to Modal stdin failed: {exc}") from exc

    def recv(self, timeout: float | None) -> bytes | None:
        return self._stdout.get(timeout)

    def close(self) -> None:
        with self._write_lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(Exception):  # the runtime sees EOF and stops; gone already is fine
                self._stdin.write_eof()
                self._stdin.drain()


def _log_stderr(stream: Iterable[bytes], label: str) -> None:
    """Forward the runtime's stderr to logging a line at a time; Modal buffers unread output otherwise."""
    rest = b""
    try:
        for chunk in stream:
            *lines, rest = (rest + bytes(chunk)).split(b"\n")
            for line in lines:
                runtime_log.info("[%s] %s", label, line.decode("utf-8", "replace"))
    except Exception as exc:
        log.debug("%s: stderr stream ended: %s", label, exc)
    if rest:
        runtime_log.info("[%s] %s", label, rest.decode("utf-8", "replace"))
