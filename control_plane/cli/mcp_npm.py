"""`hermetic mcp add NAME --npm PACKAGE`: install an MCP server from npm into the profile home (on the
host, with npm), to run sealed with Node in a sandbox of the `node` image variant (Debian's nodejs)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

NODE_IMAGE = "hermetic-sandbox:node"
MOUNT_ROOT = "/opt/mcp"


class NpmInstallError(Exception):
    """npm is missing, the package did not install, or it names no program to run."""


def package_name(spec: str) -> str:
    """The package of an npm spec: `@scope/name@^1.2` -> `@scope/name`, `name@latest` -> `name`."""
    scoped = spec.startswith("@")
    name, _, _ = spec[1:].partition("@") if scoped else spec.partition("@")
    return ("@" if scoped else "") + name


def install(spec: str, target: Path) -> str:
    """Install `spec` under `target` (npm --prefix); the program's path relative to `target`."""
    npm = shutil.which("npm")
    if npm is None:
        raise NpmInstallError("npm is not installed on this host (apt-get install npm)")
    done = subprocess.run(
        [npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(target), spec],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise NpmInstallError(f"npm could not install {spec}: {done.stderr[-2000:]}")
    name = package_name(spec)
    package = target / "node_modules" / name
    try:
        manifest = json.loads((package / "package.json").read_text())
    except (OSError, ValueError) as exc:
        raise NpmInstallError(f"{name} installed without a readable package.json: {exc}") from None
    program = _program(manifest, name)
    if program is None or not (package / program).is_file():
        raise NpmInstallError(f"{name} names no program to run (no `bin` or `main` in its package.json)")
    return str(Path("node_modules") / name / program)


def _program(manifest: dict[str, object], name: str) -> str | None:
    binary = manifest.get("bin")
    if isinstance(binary, str):
        return binary
    if isinstance(binary, dict) and binary:
        short = name.rsplit("/", 1)[-1]
        chosen = binary.get(short) or next(iter(binary.values()))
        return str(chosen)
    main = manifest.get("main")
    return main if isinstance(main, str) else None
