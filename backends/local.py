"""Local backend: the runtime in a bubblewrap sandbox on this host (or unsandboxed when configured)."""

from __future__ import annotations

import logging
import os
import resource
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

import sandboxes

from .base import Backend, Sandbox, new_sandbox_id
from .cgroups import CgroupLimits, cgroup_controller
from .channel import Channel, PipeTransport
from .errors import BackendUnavailable, SandboxError, UnsupportedSpec
from .network import SANDBOX_INGRESS_DIR, SANDBOX_NET_DIR, SYSTEM_CA_FILE, Egress, open_ingress
from .snapshots import Snapshot
from .spec import SandboxSpec
from .workspace_copy import copy_into, save_here

log = logging.getLogger("hermetic.backends.local")
# bwrap's --die-with-parent is PR_SET_PDEATHSIG, which fires when the *thread* that forked bwrap ends,
# not the process: a sandbox started from a pool thread was SIGKILLed when that thread exited (the end
# of asyncio.run's executor after a chat message, a ThreadPoolExecutor). So every sandbox is spawned
# from this one thread, which lives as long as the process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bwrap-spawner")


def spawn(args: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """subprocess.Popen from the spawner thread: for processes that die with their parent thread."""
    proc: subprocess.Popen[bytes] = _SPAWNER.submit(lambda: subprocess.Popen(args, **popen)).result()
    return proc


RUNTIME_DIR = Path(sandboxes.__file__).resolve().parent
SANDBOX_PYTHON = "/usr/bin/python3"
SANDBOX_HOME = "/home/sandbox"
SANDBOX_UID = 1000
# What of the host's /etc a sandbox sees: what programs need to run, nothing that holds secrets.
ETC_ENTRIES = (
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "timezone",
    "nsswitch.conf",
    "hosts",
    "resolv.conf",
    "gitconfig",
    "bash.bashrc",
    "inputrc",
    "mime.types",
    "magic",
    "fonts",
    "chromium",
    "chromium.d",
    "python3",
    "python3.11",
    "debian_version",
    "os-release",
    "host.conf",
    "protocols",
    "services",
)
# What the runtime's browser.* methods import, taken from the host's Python: Playwright and its one
# dependency, mounted read-only at /opt/hermetic/site as in the browser image. Chromium itself is
# the host's /usr/bin/chromium, under /usr already.
BROWSER_PACKAGES = ("playwright", "greenlet")
SANDBOX_SITE = "/opt/hermetic/site"


def _host_packages(names: tuple[str, ...]) -> list[Path]:
    """Where the host's Python keeps these packages (those it has), without importing them."""
    found = []
    for name in names:
        spec = find_spec(name)
        if spec is not None and spec.origin:
            origin = Path(spec.origin)
            found.append(origin.parent if origin.name == "__init__.py" else origin)
    return found


class LocalConfig(BaseModel):
    """The local backend's settings."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["local"] = "local"
    isolation: Literal["bwrap", "none"] = "bwrap"
    """bwrap: bubblewrap namespaces (the default). none: a plain subprocess with the host's view."""
    state_dir: Path = Path.home() / ".hermetic" / "sandboxes"
    """Where per-sandbox workspaces are created."""

    def build(self) -> LocalBackend:
        return LocalBackend(self)


class LocalBackend(Backend):
    name = "local"

    def __init__(self, config: LocalConfig | None = None) -> None:
        self.config = config or LocalConfig()
        if self.config.isolation == "bwrap":
            missing = [p for p in ("bwrap", SANDBOX_PYTHON) if not shutil.which(p)]
            if missing:
                raise BackendUnavailable(
                    f"local backend needs {', '.join(missing)}: apt-get install bubblewrap python3"
                )
        else:
            log.warning("local backend with isolation 'none': commands run on this host unsandboxed")

    def create(self, spec: SandboxSpec) -> LocalSandbox:
        if spec.network == "allowlist" and self.config.isolation == "none":
            raise UnsupportedSpec(
                "network 'allowlist' needs isolation 'bwrap': 'none' has the host's network"
            )
        return self.opened(LocalSandbox(new_sandbox_id(), spec, self.config))

    def drop_snapshot_copy(self, snapshot: Snapshot) -> None:
        shutil.rmtree(snapshot.location["path"], ignore_errors=True)


class LocalSandbox(Sandbox):
    backend = "local"

    def __init__(self, sandbox_id: str, spec: SandboxSpec, config: LocalConfig) -> None:
        super().__init__(sandbox_id, spec)
        self.config = config
        self.dir = config.state_dir / sandbox_id
        self.workspace = Path(spec.workspace) if spec.workspace else self.dir / "workspace"
        self.workspace.mkdir(parents=True, exist_ok=True)
        self._proc: subprocess.Popen[bytes] | None = None
        self._cgroup: CgroupLimits | None = None

    def cgroup_dirs(self) -> dict[str, Path]:
        if self._cgroup is None:
            return {}
        return {cgroup_controller(path): path for path in self._cgroup.dirs}

    def _environment(self, workdir: str, roots: str) -> dict[str, str]:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": SANDBOX_HOME if self.config.isolation == "bwrap" else str(self.workspace),
            "LANG": "C.UTF-8",
            "USER": "sandbox",
            "PYTHONDONTWRITEBYTECODE": "1",
            "HERMETIC_WORKSPACE": workdir,
            "HERMETIC_ROOTS": roots,
            "HERMETIC_OUTPUT_LIMIT": str(self.spec.output_limit),
        }
        env.update(self.spec.given_env())
        return env

    def _command(self) -> tuple[list[str], dict[str, str]]:
        spec = self.spec
        if self.config.isolation == "none":
            env = self._environment(str(self.workspace), f"{self.workspace}{os.pathsep}/tmp")
            env["PYTHONPATH"] = str(RUNTIME_DIR.parent)
            return [sys.executable, "-m", "sandboxes"], env
        etc = self.dir / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "passwd").write_text(
            f"root:x:0:0:root:/root:/bin/bash\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:"
            f"sandbox:{SANDBOX_HOME}:/bin/bash\nnobody:x:65534:65534::/:/bin/false\n"
        )
        (etc / "group").write_text(f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n")
        args = ["bwrap", "--die-with-parent", "--new-session", "--unshare-all", "--hostname", "sandbox"]
        if spec.network == "full":
            args.append("--share-net")
        if self.egress is not None:  # the network stays unshared: the proxy's socket is the way out
            args += ["--ro-bind", str(self.egress.socket_dir), SANDBOX_NET_DIR]
        if self.ingress is not None:
            args += ["--bind", str(self.ingress.dir), SANDBOX_INGRESS_DIR]
        args += ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            top = Path("/") / name
            if top.is_symlink():
                args += ["--symlink", os.readlink(top), str(top)]
            elif top.is_dir():
                args += ["--ro-bind", str(top), str(top)]
        for entry in ETC_ENTRIES:
            args += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
        args += [
            "--ro-bind",
            str(etc / "passwd"),
            "/etc/passwd",
            "--ro-bind",
            str(etc / "group"),
            "/etc/group",
        ]
        system = Path(SYSTEM_CA_FILE)  # the host's /etc/ssl is the sandbox's: its bundle plus the CA
        store = self.egress.trust_store(system.read_bytes()) if self.egress and system.is_file() else None
        if store is not None:
            args += ["--ro-bind", str(store), SYSTEM_CA_FILE]
        args += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(spec.disk_bytes),
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            SANDBOX_HOME,
            "--bind",
            str(self.workspace),
            spec.workdir,
            "--ro-bind",
            str(RUNTIME_DIR),
            "/opt/hermetic/sandboxes",
        ]
        for package in _host_packages(BROWSER_PACKAGES):  # for browser.*; /tmp is the browser's temp dir
            args += ["--ro-bind", str(package), f"{SANDBOX_SITE}/{package.name}"]
        for mount in spec.mounts:
            args += ["--ro-bind" if mount.read_only else "--bind", mount.source, mount.target]
        args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--chdir", spec.workdir]
        if os.geteuid() == 0:
            args += ["--cap-drop", "ALL"]
        env = self._environment(spec.workdir, f"{spec.workdir}{os.pathsep}/tmp")
        env["PYTHONPATH"] = f"/opt/hermetic:{SANDBOX_SITE}"
        env.update(self.egress.env if self.egress is not None else {})
        env.update(self.ingress.env if self.ingress is not None else {})
        args.append("--clearenv")
        for key, value in env.items():
            args += ["--setenv", key, value]
        args += [SANDBOX_PYTHON, "-m", "sandboxes"]
        return args, {}

    def _provision(self) -> None:
        if self.config.isolation == "bwrap":
            self.ingress = open_ingress(self.id)
        if self.spec.network == "allowlist":
            self.egress = Egress.attach(self.id, self.spec.allow, self.spec.credentials)

    def _connect(self) -> Channel:
        args, env = self._command()
        if self._cgroup is None:
            self._cgroup = CgroupLimits.create(
                self.id, self.spec.pids, self.spec.memory_bytes, self.spec.cpus
            )
            if self._cgroup is None:
                log.warning(
                    "sandbox %s: no cgroups here; limiting processes by rlimit only, memory unlimited",
                    self.id,
                )
        cgroup, pids = self._cgroup, self.spec.pids

        def limit() -> None:  # in the child, before exec
            if cgroup is not None:
                cgroup.enter()
            else:
                resource.setrlimit(resource.RLIMIT_NPROC, (pids, pids))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        self._proc = spawn(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=self.workspace,
            start_new_session=True,
            preexec_fn=limit,
        )
        channel = Channel(PipeTransport(self._proc, self.id), f"local sandbox {self.id}")
        channel.handshake()
        return channel

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _recover(self) -> str:
        self._stop_process()
        return (
            "the sandbox's runtime stopped and was restarted: shell sessions and background "
            "processes were lost; the workspace was kept"
        )

    def _stop_process(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()  # bwrap is PID 1 of the sandbox's namespace: everything inside dies
            self._proc.wait()

    # -- snapshots: copies of the workspace directory (backends/workspace_copy.py) ---------------

    def _save_workspace(self, snapshot_id: str) -> tuple[dict[str, str], int]:
        dest = self._backend_for_snapshots().snapshots.data_dir(snapshot_id)
        size, path = save_here(str(self.workspace), str(dest))
        return {"path": path}, size

    def _seed_workspace(self, location: dict[str, str]) -> None:
        _shell(copy_into(location["path"], str(self.workspace)))

    def _fork_workspace(self) -> LocalSandbox:
        spec = self.spec.model_copy(update={"workspace": None, "from_snapshot": None})
        child = LocalSandbox(new_sandbox_id(), spec, self.config)
        try:
            _shell(copy_into(str(self.workspace), str(child.workspace)))
        except BaseException:
            child.close()
            raise
        return self._backend_for_snapshots().opened(child)

    def _destroy(self) -> None:
        self._stop_process()
        if self.egress is not None:
            self.egress.close()
        if self.ingress is not None:
            self.ingress.close()
        if self._cgroup is not None:
            self._cgroup.remove()
        if self.spec.workspace is None:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            shutil.rmtree(self.dir / "etc", ignore_errors=True)


def _shell(command: str) -> str:
    """Run a workspace_copy command here; its stdout, or SandboxError with its stderr."""
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True)
    if done.returncode != 0:
        raise SandboxError(done.stderr.strip() or f"exit status {done.returncode}")
    return done.stdout.strip()
