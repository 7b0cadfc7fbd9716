"""What a sandbox must not see or do, on every backend."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import Backend, Sandbox, SandboxSpec


@pytest.mark.needs("isolation")
def test_runs_unprivileged_with_no_capabilities(sandbox: Sandbox) -> None:
    out = sandbox.run("id -u; grep CapEff /proc/self/status")["output"]
    assert out.split() == ["1000", "CapEff:", "0000000000000000"]


@pytest.mark.needs("isolation")
def test_host_files_outside_the_workspace_are_invisible(sandbox: Sandbox, tmp_path: Path) -> None:
    secret = Path("/root") / f"hermetic-secret-{uuid.uuid4().hex}"
    secret.write_text("top secret")
    try:
        result = sandbox.run(f"cat {secret} {tmp_path} 2>&1; ls /root 2>&1; cat /etc/shadow 2>&1")
        assert "top secret" not in result["output"] and result["exit_code"] != 0
    finally:
        secret.unlink()


@pytest.mark.needs("isolation")
def test_system_is_read_only_and_workspace_writable(sandbox: Sandbox) -> None:
    result = sandbox.run("touch /usr/x 2>&1; touch ./ok && echo wrote")
    assert "Read-only file system" in result["output"] and result["output"].endswith("wrote\n")


@pytest.mark.needs("isolation")
def test_no_network_under_policy_none(sandbox: Sandbox) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        probe = (
            "python3 -c 'import socket\ntry:\n"
            ' socket.create_connection(("127.0.0.1", %d), 2); print("reached")'
            '\nexcept OSError as e: print("blocked", e)\'; cat /proc/net/dev | tail -n +3 | cut -d: -f1'
            % port
        )
        result = sandbox.run(probe)
    lines = [line.strip() for line in result["output"].splitlines()]
    assert lines[0].startswith("blocked")
    assert lines[1:] == ["lo"]  # no interface but loopback


@pytest.fixture
def secret_env() -> Iterator[str]:
    name = "HERMETIC_TEST_SECRET_" + uuid.uuid4().hex[:6].upper()
    os.environ[name] = "sk-live-do-not-leak"
    os.environ["ALLOWED_VAR"] = "passed-in"
    yield name
    del os.environ[name], os.environ["ALLOWED_VAR"]


def test_host_environment_reaches_the_sandbox_only_by_allowlist(backend: Backend, secret_env: str) -> None:
    spec = SandboxSpec(env_allow=["ALLOWED_VAR"], env={"EXPLICIT": "set"})
    with backend.create(spec) as sb:
        env = sb.run("env")["output"]
    assert "sk-live-do-not-leak" not in env and secret_env not in env
    assert "ALLOWED_VAR=passed-in" in env and "EXPLICIT=set" in env
    assert "HERMETIC_" not in env  # the runtime's own settings stay out of the shells


@pytest.mark.needs("limits")
def test_process_limit_is_enforced(sandbox: Sandbox) -> None:
    # Python's fork fails at once where bash's retries for 15 s; the children wait on a pipe, not a timer
    result = sandbox.run(_FORK_UNTIL_REFUSED, timeout=60)
    words = result["output"].split()
    assert words[:2] == ["refused", "after"], result["output"]
    assert 16 < int(words[2]) < 256  # the sandbox's own processes count against its 256 pids too


_FORK_UNTIL_REFUSED = """python3 - <<'EOF'
import os
r, w = os.pipe()
kids = 0
try:
    while kids < 1000:
        if os.fork() == 0:
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        kids += 1
    print("forked", kids)
except BlockingIOError:
    print("refused after", kids)
os.close(w)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
EOF"""
