"""Third-party MCP servers for the tests, installed once from the package registries into the venv:
mcp-server-time and mcp-server-git from PyPI (`pip install --target`), the reference memory server from
npm (`npm install --prefix`). A sandbox gets one as a read-only mount; nothing is installed inside it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CACHE = Path(sys.prefix) / "mcp-test-servers"
MOUNT = "/opt/mcp"
PYPI = {"time": "mcp-server-time", "git": "mcp-server-git"}
NPM = {"memory": "@modelcontextprotocol/server-memory"}
NPM_ENTRY = {"memory": "node_modules/@modelcontextprotocol/server-memory/dist/index.js"}


def installed(name: str) -> Path:
    """The server's install directory, installed on first use; skips (with the reason) when it cannot be."""
    target = CACHE / name
    done = target / ".installed"
    if done.exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    if name in PYPI:
        command = [sys.executable, "-m", "pip", "install", "-q", "--target", str(target), PYPI[name]]
    else:
        if shutil.which("npm") is None:
            pytest.skip("npm is not installed: the npm reference server cannot be installed")
        command = ["npm", "install", "--silent", "--prefix", str(target), NPM[name]]
    done_run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done_run.returncode != 0:
        pytest.skip(f"cannot install {name} from its registry: {done_run.stderr[-500:]}")
    done.touch()
    return target


def server_config(name: str, env: dict[str, str] | None = None, **extra: object) -> dict[str, object]:
    """An mcp_servers entry running the installed server sealed in a sandbox (its code mounted read-only)."""
    mount = {"source": str(installed(name)), "target": f"{MOUNT}/{name}"}
    if name in PYPI:
        command, args = "python3", ["-m", PYPI[name].replace("-", "_")]
        env = {"PYTHONPATH": f"{MOUNT}/{name}", **(env or {})}
    else:
        command, args = "node", [f"{MOUNT}/{name}/{NPM_ENTRY[name]}"]
    return {"command": command, "args": args, "env": env or {}, "mounts": [mount], "timeout": 30.0, **extra}
