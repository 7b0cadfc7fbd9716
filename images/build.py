"""Offline builder for sandbox images: debootstrap a rootfs, `docker import` it, add the runtime.

Stage base (hermetic-base:<variant>-<hash>) is keyed by the recipe only, never the runtime code;
stage final (hermetic-sandbox:<variant>-<hash>, alias :<variant>) adds sandboxes/ on top.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import io
import json
import logging
import os
import py_compile
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path

import docker
import requests
from docker.errors import DockerException, ImageNotFound, NotFound
from rich.console import Console

import sandboxes

from .progress import DebootstrapProgress, LogReport, Report, Step, ignore, progress_bar

log = logging.getLogger(__name__)
IMPORT_CHUNK = 1 << 20
"""Bytes of the rootfs tarball per write to dockerd (each one reported)."""

RECIPE_VERSION = "1"  # bump whenever the rootfs steps below change
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
SLIM_PACKAGES = ("python3", "bash", "coreutils", "procps", "git", "ripgrep", "curl",
                 "ca-certificates", "tini")  # fmt: skip
KERNEL_EXTRAS = ("python3-ipykernel",)  # the python tool's Jupyter kernel (sandboxes/kernel.py)
BROWSER_EXTRAS = ("chromium", "fonts-liberation", "libatomic1")
NODE_EXTRAS = ("nodejs",)  # Debian's Node.js (18 on bookworm): MCP servers installed from npm run on it
SERVICE_EXTRAS = ("haproxy", "postgresql")  # the compose deployment's offline images (images/services.py)
PACKAGES = {
    "slim": SLIM_PACKAGES + KERNEL_EXTRAS,
    "browser": SLIM_PACKAGES + KERNEL_EXTRAS + BROWSER_EXTRAS,
    "node": SLIM_PACKAGES + NODE_EXTRAS,
    "service": SLIM_PACKAGES + SERVICE_EXTRAS,
}
SANDBOX_VARIANTS = ("slim", "browser", "node")
BASE_REPO, SANDBOX_REPO = "hermetic-base", "hermetic-sandbox"
USER, UID, GID, HOME, WORKDIR = "sandbox", 1000, 1000, "/home/sandbox", "/workspace"
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "HOME": HOME,
    "PYTHONPATH": "/opt/hermetic:/opt/hermetic/site",
    "PYTHONDONTWRITEBYTECODE": "1",
}
TMP_ROOT = "/var/tmp"
_DOCKERD_HINT = "start it with: dockerd > /var/log/dockerd.log 2>&1 &"
# Commands on the host and in the chroot get a clean environment, not the caller's.
_TOOL_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root",
             "DEBIAN_FRONTEND": "noninteractive"}  # fmt: skip

# Written into the rootfs after debootstrap. bookworm main lags the security suite by months
# (chromium above all), so the build upgrades from it; dpkg then skips docs like debian-slim.
_CONFIG_FILES = {
    "etc/apt/sources.list": f"deb {MIRROR} {SUITE} main\ndeb {MIRROR} {SUITE}-updates main\n"
                            f"deb {SECURITY_MIRROR} {SUITE}-security main\n",
    "etc/apt/apt.conf.d/90hermetic": 'APT::Install-Recommends "false";\n'
                                     'APT::Install-Suggests "false";\n',
    "etc/dpkg/dpkg.cfg.d/90hermetic": "path-exclude /usr/share/doc/*\n"
        "path-include /usr/share/doc/*/copyright\npath-exclude /usr/share/locale/*\n"
        "path-exclude /usr/share/man/*\npath-exclude /usr/share/info/*\n",
}  # fmt: skip
# Removed from the rootfs at the end (files named "copyright" are kept); docker provides /dev.
_JUNK = ("var/lib/apt/lists/*", "var/cache/apt/*.bin", "var/cache/debconf/*-old",
         "var/log/**/*.log", "var/log/apt/*", "usr/share/doc/*/*", "usr/share/locale/*",
         "usr/share/man/*", "usr/share/info/*", "dev/*")  # fmt: skip


class ImageBuildError(RuntimeError):
    """An image could not be built (or dockerd is unreachable); the message says why."""


def ensure_image(
    variant: str = "slim",
    *,
    force: bool = False,
    client: docker.DockerClient | None = None,
    report: Report = ignore,
) -> str:
    """Return the tag of the sandbox image for `variant`, building only the missing stages, telling
    `report` how far the build is (images/progress.py).

    Raises ImageBuildError (dockerd unreachable, a build step failed) or ValueError (variant).
    """
    if variant not in SANDBOX_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {sorted(SANDBOX_VARIANTS)}")
    client = client or _connect()
    base_hash = _base_hash(variant)
    base_tag = f"{BASE_REPO}:{variant}-{base_hash[:12]}"
    tag = _final_tag(variant, base_hash, sandboxes.code_hash())
    if force or not _exists(client, tag):
        with _lock(variant):
            if force or not _exists(client, base_tag):
                _build_base(client, variant, base_tag, base_hash, report)
            report(Step("add the runtime", 0, 1))
            tag = _build_final(client, variant, base_tag, base_hash, force=force)
            report(Step("add the runtime", 1, 1))
    image = client.images.get(tag)
    if f"{SANDBOX_REPO}:{variant}" not in image.tags:
        image.tag(SANDBOX_REPO, variant)
    return tag


FINAL_RECIPE = 2  # bump when what the final stage adds changes
IMAGE_PYTHON = (3, 11)  # bookworm's python3


def _final_tag(variant: str, base_hash: str, runtime_hash: str) -> str:
    digest = hashlib.sha256(f"{base_hash}\0{runtime_hash}\0{FINAL_RECIPE}".encode()).hexdigest()
    return f"{SANDBOX_REPO}:{variant}-{digest[:12]}"


def _connect() -> docker.DockerClient:
    try:
        client = docker.from_env()
        client.ping()
    except (DockerException, requests.RequestException) as exc:
        raise ImageBuildError(f"dockerd is unreachable ({exc}); {_DOCKERD_HINT}") from exc
    return client


def _playwright_version() -> str:
    try:
        return metadata.version("playwright")
    except metadata.PackageNotFoundError as exc:
        raise ImageBuildError("the browser variant needs `pip install playwright`") from exc


def _base_hash(variant: str) -> str:
    inputs = {"variant": variant, "packages": PACKAGES[variant], "recipe": RECIPE_VERSION}
    if variant == "browser":
        inputs["playwright"] = _playwright_version()
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def _exists(client: docker.DockerClient, tag: str) -> bool:
    with contextlib.suppress(ImageNotFound):
        return bool(client.images.get(tag))
    return False


def _changes(labels: dict[str, str]) -> list[str]:
    """Dockerfile instructions applied by `docker import` and `docker commit`."""
    out = [f"ENV {key}={value}" for key, value in ENV.items()]
    out += [f"WORKDIR {WORKDIR}", 'CMD ["sleep", "infinity"]']
    return out + [f'LABEL {key}="{value}"' for key, value in labels.items()]


@contextlib.contextmanager
def _lock(variant: str) -> Iterator[None]:
    """Serialize builders of one variant across processes."""
    fd = os.open(os.path.join(TMP_ROOT, f"hermetic-image-{variant}.lock"), os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another builder holds the %s lock; waiting", variant)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _run(
    *cmd: str,
    env: dict[str, str] = _TOOL_ENV,
    extra_log: Path | None = None,
    on_line: Callable[[str], None] | None = None,
) -> None:
    """Run a build step, each line of its output (stdout and stderr) to `on_line` as it comes; on
    failure raise ImageBuildError with the tail of its output."""
    log.info("run: %s", " ".join(cmd))
    tail: deque[str] = deque(maxlen=40)
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", env=env
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            tail.append(line.rstrip("\n"))
            if on_line is not None:
                on_line(line)
    if process.returncode != 0:
        detail = "\n".join(tail)
        if extra_log is not None and extra_log.exists():
            detail += f"\n--- tail of {extra_log.name} ---\n{extra_log.read_text(errors='replace')}"
        detail = "\n".join(detail.splitlines()[-40:])
        raise ImageBuildError(f"{' '.join(cmd[:3])} ... failed (exit {process.returncode}):\n{detail}")


def _build_rootfs(variant: str, rootfs: Path, report: Report) -> None:
    """debootstrap, security updates, extra packages, user and dirs, Playwright, cleanup."""
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise ImageBuildError("a base image build needs root and debootstrap (apt-get install)")
    include = f"--include={','.join(SLIM_PACKAGES)}"
    _run("debootstrap", "--variant=minbase", include, SUITE, str(rootfs), MIRROR,
         extra_log=rootfs / "debootstrap" / "debootstrap.log",
         on_line=DebootstrapProgress(report).feed)  # fmt: skip
    chroot = ("chroot", str(rootfs))
    for name, text in _CONFIG_FILES.items():
        (rootfs / name).write_text(text)
    extras = [pkg for pkg in PACKAGES[variant] if pkg not in SLIM_PACKAGES]
    apt = [("update", "-q"), ("dist-upgrade", "-y", "-q")] + (
        [("install", "-y", "-q", *extras)] if extras else []
    )
    for done, args in enumerate(apt):
        report(Step("upgrade and add packages", done, len(apt), detail=f"apt-get {args[0]}"))
        _run(*chroot, "apt-get", *args)
    report(Step("upgrade and add packages", len(apt), len(apt)))
    _run(*chroot, "groupadd", "--gid", str(GID), USER)
    _run(*chroot, *f"useradd -u {UID} -g {GID} -d {HOME} -m -s /bin/bash {USER}".split())
    for path in (rootfs / WORKDIR.lstrip("/"), rootfs / "opt/hermetic/site"):
        path.mkdir(parents=True, exist_ok=True)
    os.chown(rootfs / WORKDIR.lstrip("/"), UID, GID)
    if variant == "browser":
        site = rootfs / "opt/hermetic/site"
        pip = (sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check")
        _run(*pip, "--only-binary=:all:", "--no-warn-script-location", "--target", str(site),
             f"playwright=={_playwright_version()}", env=dict(os.environ))  # fmt: skip
        shutil.rmtree(site / "bin", ignore_errors=True)  # its scripts name the host's python
    _run(*chroot, "apt-get", "clean")
    for pattern in _JUNK:
        for path in rootfs.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.name != "copyright":
                path.unlink()
    for name in ("etc/resolv.conf", "etc/hostname"):  # docker mounts its own; drop the host's copy
        (rootfs / name).write_text("")


def _build_base(client: docker.DockerClient, variant: str, tag: str, base_hash: str, report: Report) -> None:
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="hermetic-image-", dir=TMP_ROOT))
    try:
        rootfs = workdir / "rootfs"
        _build_rootfs(variant, rootfs, report)
        tarball = workdir / "rootfs.tar"
        report(Step("pack the root filesystem", 0, 1))
        # posix format keeps sub-second mtimes (else fontconfig's cache looks stale)
        tar = ("tar", "--format=posix", "--numeric-owner", "-C", str(rootfs), "-c")
        _run(*tar, "-f", str(tarball), ".")
        report(Step("pack the root filesystem", 1, 1))
        log.info("docker import %s (%d MiB)", tag, tarball.stat().st_size // 2**20)
        labels = {"org.hermetic.variant": variant, "org.hermetic.base-hash": base_hash}
        import_tarball(client, tarball, tag, _changes(labels), report)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    log.info("built %s in %.1f s", tag, time.monotonic() - started)


def import_tarball(
    client: docker.DockerClient, tarball: Path, tag: str, changes: list[str], report: Report = ignore
) -> None:
    """`docker import` of a root filesystem tarball as `tag`, streamed from here so each MiB sent is
    reported. Raises ImageBuildError."""
    size = tarball.stat().st_size

    def chunks() -> Iterator[bytes]:
        sent = 0
        report(Step("docker import", 0, size, "bytes"))
        with tarball.open("rb") as source:
            while chunk := source.read(IMPORT_CHUNK):
                yield chunk
                sent += len(chunk)
                report(Step("docker import", sent, size, "bytes"))

    repo, _, version = tag.partition(":")
    timeout, client.api.timeout = client.api.timeout, None  # dockerd answers once the layer is written
    try:
        result = client.api.import_image(
            src=chunks(), repository=repo, tag=version, changes=changes, stream_src=True
        )
    except DockerException as exc:
        raise ImageBuildError(f"docker import of {tag} failed: {exc}") from exc
    finally:
        client.api.timeout = timeout
    if not _exists(client, tag):
        raise ImageBuildError(f"docker import of {tag} produced no image: {result}")


def _runtime_tar() -> bytes:
    """The runtime's .py files as sandboxes/..., owned by root and world-readable, with bytecode."""
    package_dir = Path(sandboxes.__file__).parent
    files = [Path(rel) for rel in sandboxes.source_files()]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted({parent for f in files for parent in f.parents} | set(files)):
            info = tar.gettarinfo(package_dir / rel, arcname=str("sandboxes" / rel))
            info.uid, info.gid, info.uname, info.gname = 0, 0, "root", "root"
            info.mode = 0o755 if info.isdir() else 0o644
            tar.addfile(info, io.BytesIO((package_dir / rel).read_bytes()) if info.isfile() else None)
        for rel in files:
            for name, data in _bytecode(package_dir / rel, rel).items():
                info = tarfile.TarInfo(name)
                info.mode, info.mtime = (
                    (0o755, int(time.time())) if data is None else (0o644, int(time.time()))
                )
                if data is None:
                    info.type = tarfile.DIRTYPE
                else:
                    info.size = len(data)
                tar.addfile(info, None if data is None else io.BytesIO(data))
    return buf.getvalue()


def _bytecode(source: Path, rel: Path) -> dict[str, bytes | None]:
    """Bytecode for the image's python3.11: its root is read-only and PYTHONDONTWRITEBYTECODE is
    set, so without it every runtime start compiles the runtime again (~20 ms). Hash-checked, so
    a stale .pyc is never used. Only when this Python has the same bytecode version."""
    if sys.version_info[:2] != IMAGE_PYTHON:
        return {}
    cache_dir = f"sandboxes/{rel.parent}/__pycache__".replace("/./", "/")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.pyc"
        py_compile.compile(
            str(source),
            cfile=str(out),
            dfile=f"/opt/hermetic/sandboxes/{rel}",
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
        )
        return {cache_dir: None, f"{cache_dir}/{rel.stem}.cpython-311.pyc": out.read_bytes()}


def _build_final(
    client: docker.DockerClient, variant: str, base_tag: str, base_hash: str, *, force: bool
) -> str:
    """Commit base + the runtime as it is now (hashed before and after reading it)."""
    for _ in range(3):
        runtime_hash = sandboxes.code_hash()
        tag = _final_tag(variant, base_hash, runtime_hash)
        if not force and _exists(client, tag):
            return tag
        data = _runtime_tar()
        if sandboxes.code_hash() == runtime_hash:
            break
    else:
        raise ImageBuildError("sandboxes/ kept changing while it was being copied; retry")
    log.info("building %s from %s with runtime %s", tag, base_tag, runtime_hash)
    name = f"hermetic-build-{tag.partition(':')[2]}"
    with contextlib.suppress(NotFound):
        client.containers.get(name).remove(force=True)  # left over by a killed builder
    try:
        container = client.containers.create(base_tag, name=name)
    except DockerException as exc:
        raise ImageBuildError(f"cannot create a container from {base_tag}: {exc}") from exc
    try:
        if not container.put_archive("/opt/hermetic", data):
            raise ImageBuildError(f"could not copy the runtime into {name}")
        labels = {"org.hermetic.runtime-hash": runtime_hash, "org.hermetic.variant": variant,
                  "org.hermetic.base": base_tag}  # fmt: skip
        repo, _, version = tag.partition(":")
        container.commit(repository=repo, tag=version, changes=_changes(labels), pause=False)
    except DockerException as exc:
        raise ImageBuildError(f"adding the runtime to {base_tag} failed: {exc}") from exc
    finally:
        container.remove(force=True)
    return tag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m images.build", description=__doc__)
    parser.add_argument("--variant", choices=sorted(SANDBOX_VARIANTS), default="slim")
    parser.add_argument("--force", action="store_true", help="rebuild both stages even if cached")
    args = parser.parse_args(argv)
    # setup.sh reads the tag from stdout; the progress goes to stderr: a bar at a terminal (which the
    # step-by-step log would break up: warnings only), else lines in the log
    at_terminal = sys.stderr.isatty()
    level = logging.WARNING if at_terminal else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s")
    shown = progress_bar(Console(stderr=True)) if at_terminal else contextlib.nullcontext(LogReport())
    try:
        with shown as report:
            tag = ensure_image(args.variant, force=args.force, report=report)
    except ImageBuildError as exc:
        parser.exit(1, f"error: {exc}\n")
    print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
