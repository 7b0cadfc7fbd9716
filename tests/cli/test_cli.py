"""The `hermetic` command as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hermetic_cli import hermetic as run_hermetic
from hermetic_cli import ssh_env

from backends import Backend


def hermetic(
    *args: str, stdin: str | None = None, backend: Backend | None = None
) -> subprocess.CompletedProcess[str]:
    # where the ssh backend connects comes from settings
    return run_hermetic(*args, env={**os.environ, **ssh_env(backend)}, stdin=stdin, timeout=300)


@pytest.mark.needs("cli")
def test_exec_passes_the_exit_code_through(backend: Backend) -> None:
    done = hermetic(
        "sandbox", "exec", "--backend", backend.name, "--", "sh", "-c", "echo out; exit 3", backend=backend
    )
    assert done.returncode == 3 and done.stdout == "out\n"


@pytest.mark.needs("cli")
def test_shell_from_a_pipe_runs_lines_in_order_in_one_session(backend: Backend) -> None:
    done = hermetic(
        "sandbox",
        "shell",
        "--backend",
        backend.name,
        stdin="cd /tmp\nexport A=1\necho $A $PWD\n",
        backend=backend,
    )
    assert done.returncode == 0 and done.stdout == "1 /tmp\n"


def test_unknown_backend_is_a_clear_error() -> None:
    done = hermetic("sandbox", "exec", "--backend", "nope", "--", "true")
    assert done.returncode == 2 and "unknown backend 'nope'" in done.stderr


@pytest.mark.parametrize("name", ["local"])
def test_sandbox_demo_runs_end_to_end(name: str) -> None:
    done = hermetic("sandbox", "demo", "--backend", name)
    assert done.returncode == 0, done.stderr
    assert "hello, world (from /tmp)" in done.stderr and "timed out, killed" in done.stderr


def test_ssh_without_settings_says_what_to_set() -> None:
    env_free = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_SSH")}
    done = subprocess.run(
        [sys.executable, "-m", "control_plane", "sandbox", "exec", "--backend", "ssh", "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env_free,
    )
    assert done.returncode == 2 and "HERMETIC_SSH__HOST" in done.stderr
