"""What this machine has for Hermetic, what is missing, and the command that fixes it: the checks of
`hermetic doctor` and of the console's status page (GET /status/checks)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .config.settings import Settings

Status = Literal["ok", "warn", "fail", "skip"]
CHECK_TIMEOUT = 8.0  # seconds one check may take before its row says it hung
MODEL_TIMEOUT = 6.0
CHROMIUM = Path("/usr/bin/chromium")
HOST_SITE = Path("/opt/hermetic/site")  # setup.sh installs the host's Playwright here
DOCKER_FIX = "apt-get install docker.io && (systemctl start docker || dockerd > /var/log/dockerd.log 2>&1 &)"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None


def _docker() -> Any:
    import docker

    return docker.from_env(timeout=5)


def check_docker(settings: Settings) -> Check:
    try:
        version = _docker().version()
    except Exception as exc:
        return Check("dockerd", "fail", f"not reachable: {exc}", DOCKER_FIX + " (or fix DOCKER_HOST)")
    where = f" through {os.environ['DOCKER_HOST']}" if os.environ.get("DOCKER_HOST") else ""
    return Check("dockerd", "ok", f"docker {version.get('Version')} (API {version.get('ApiVersion')}){where}")


def check_images(settings: Settings) -> list[Check]:
    """The configured sandbox image and the browser one: present, and built with this runtime's code."""
    from docker.errors import ImageNotFound

    import sandboxes

    wanted = {settings.sandbox.image: "fail", "hermetic-sandbox:browser": "warn"}
    try:
        client = _docker()
    except Exception:
        return [Check(f"image {image}", "skip", "dockerd not reachable") for image in wanted]
    rows = []
    for image, missing_status in wanted.items():
        name = f"image {image}"
        repo, _, tag = image.partition(":")
        variant = tag.split("-")[0]  # slim-<hash> is a slim image too
        fix = (
            f"hermetic image build --variant {variant}"
            if repo == "hermetic-sandbox" and variant in ("slim", "browser")
            else f"build or load {image}, or set HERMETIC_SANDBOX__IMAGE=hermetic-sandbox:slim"
        )
        try:
            labels = client.images.get(image).labels or {}
        except ImageNotFound:
            rows.append(Check(name, missing_status, "not present", fix))  # type: ignore[arg-type]
            continue
        if labels.get("org.hermetic.runtime-hash") == sandboxes.code_hash():
            rows.append(Check(name, "ok", "present, current runtime"))
        else:
            detail = "present, older runtime (each sandbox gets the current one copied in at start)"
            rows.append(Check(name, "warn", detail, fix))
    return rows


def check_bubblewrap(settings: Settings) -> Check:
    status: Status = "fail" if settings.backend == "local" else "warn"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Check(
            "bubblewrap", status, "bwrap not found (the local backend needs it)", "apt-get install bubblewrap"
        )
    probe = [bwrap, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=5)
    if done.returncode != 0:
        fix = (
            "sysctl -w kernel.unprivileged_userns_clone=1 (or allow user namespaces in the container runtime)"
        )
        return Check("bubblewrap", status, f"cannot create namespaces: {done.stderr.strip()}", fix)
    return Check("bubblewrap", "ok", f"{bwrap} creates namespaces")


def check_chromium(settings: Settings) -> Check:
    if not CHROMIUM.exists():
        return Check("chromium", "warn", f"{CHROMIUM} missing (browser tools on the local backend)",
                     "apt-get install chromium fonts-liberation libatomic1")  # fmt: skip
    if not (HOST_SITE / "playwright").is_dir():
        return Check("chromium", "warn", f"{CHROMIUM} present; no Playwright in {HOST_SITE}", "./setup.sh")
    return Check("chromium", "ok", f"{CHROMIUM}, Playwright in {HOST_SITE}")


def check_sshd(settings: Settings) -> Check:
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    if sshd is None:
        return Check(
            "sshd", "warn", "not found (the SSH backend's tests start one)", "apt-get install openssh-server"
        )
    return Check("sshd", "ok", sshd)


def check_backend(settings: Settings) -> Check:
    from backends import create_backend

    name = settings.backend or "docker"
    config = {"ssh": settings.ssh, "modal": settings.modal}.get(name)
    try:
        backend = create_backend(name, config)
    except Exception as exc:
        fix = "set HERMETIC_BACKEND=local|docker|ssh|modal" + (
            " (or start dockerd)" if name == "docker" else ""
        )
        return Check(f"backend {name}", "fail", str(exc), fix)
    return Check(f"backend {name}", "ok", f"{type(backend).__name__} ready")


def check_snapshots(settings: Settings) -> Check:
    """How many snapshots this profile keeps and the disk they use; damaged records are a warning."""
    from .sandbox_manager import snapshot_store
    from .sizes import human_size

    store = snapshot_store(settings)
    snapshots, damaged = store.list(), store.damaged()
    detail = f"{len(snapshots)} snapshots, {human_size(sum(s.bytes for s in snapshots))} in {store.root}"
    if damaged:
        return Check(
            "snapshots", "warn", f"{len(damaged)} damaged records; {detail}", "hermetic snapshot list"
        )
    return Check("snapshots", "ok", detail)


def check_database(settings: Settings) -> Check:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    url = str(settings.database_url)
    shown = make_url(url).render_as_string(hide_password=True)
    fix = "set HERMETIC_DATABASE_URL (sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST/DB)"
    try:
        engine = create_engine(
            url, connect_args={"connect_timeout": 5} if url.startswith("postgresql") else {}
        )
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        return Check("database", "fail", f"{shown}: {exc}".splitlines()[0], fix)
    return Check("database", "ok", shown)


def check_recall(settings: Settings) -> Check:
    """Which embedding model recall uses and where its vectors live (sqlite-vec, pgvector or the fallback)."""
    from sqlalchemy import create_engine

    from .store.vectors import vector_storage

    model = settings.memory.embeddings.model
    if model == "off":
        return Check("recall", "warn", "keyword only (memory.embeddings.model: off)", "set it to wordllama")
    try:
        engine = create_engine(str(settings.database_url))
        try:
            where = vector_storage(engine)
        finally:
            engine.dispose()
    except Exception as exc:
        return Check("recall", "fail", f"{model}: {exc}".splitlines()[0], "see the database check")
    return Check("recall", "ok", f"{model}; vectors: {where}")


def check_model(settings: Settings, offline: bool) -> Check:
    model = settings.model
    if not model.name:
        fix = (
            "run `hermetic setup` (asks for the model and its key), or `hermetic model set "
            "anthropic/claude-sonnet-4-5` (a local server: `hermetic model set openai/MODEL --api-base "
            "http://HOST:PORT/v1`); environment variables work too: HERMETIC_MODEL__NAME and the key"
        )
        return Check("model", "fail", "no model configured: the agent cannot run", fix)
    from .models.router import Router

    router = Router(model)
    problems = router.problems()
    if problems:
        return Check("model", "fail", "; ".join(map(str, problems)), "fix the model settings named above")
    if offline:
        return Check("model", "ok", f"{model.name} configured (not called: --offline)")
    call = router.complete([{"role": "user", "content": "Say OK"}], stream=False)
    try:
        asyncio.run(asyncio.wait_for(call, MODEL_TIMEOUT))
    except Exception as exc:
        detail = f"{model.name} did not answer: {type(exc).__name__}: {exc}".splitlines()[0]
        return Check("model", "fail", detail, "check the key, HERMETIC_MODEL__API_BASE and the network")
    return Check("model", "ok", f"{model.name} answers")


def run_checks(settings: Settings, offline: bool = False) -> list[Check]:
    """Every check, run in parallel; a check that raises or hangs becomes a failed row."""
    checks: list[tuple[str, Callable[[], Check | list[Check]]]] = [
        ("dockerd", lambda: check_docker(settings)),
        ("sandbox images", lambda: check_images(settings)),
        ("bubblewrap", lambda: check_bubblewrap(settings)),
        ("chromium", lambda: check_chromium(settings)),
        ("sshd", lambda: check_sshd(settings)),
        ("backend", lambda: check_backend(settings)),
        ("database", lambda: check_database(settings)),
        ("recall", lambda: check_recall(settings)),
        ("snapshots", lambda: check_snapshots(settings)),
        ("model", lambda: check_model(settings, offline)),
    ]
    pool = ThreadPoolExecutor(max_workers=len(checks))
    futures = [(name, pool.submit(run)) for name, run in checks]
    rows: list[Check] = []
    for name, future in futures:
        try:
            result = future.result(timeout=CHECK_TIMEOUT + MODEL_TIMEOUT)
        except FutureTimeout:
            rows.append(Check(name, "fail", "did not finish in time (hung)"))
            continue
        except Exception as exc:
            rows.append(Check(name, "fail", f"{type(exc).__name__}: {exc}"))
            continue
        rows.extend(result if isinstance(result, list) else [result])
    pool.shutdown(wait=False, cancel_futures=True)  # never wait on a hung check
    return rows
