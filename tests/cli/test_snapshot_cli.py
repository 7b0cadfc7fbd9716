"""`hermetic snapshot ...`, `hermetic sandbox ... --snapshot/--from-snapshot` and `hermetic sessions
checkpoints|rollback|fork`, each command its own process: snapshots outlive the control plane."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from agent_runs import call, run, settings_for
from doctor_run import doctor, status
from hermetic_cli import hermetic as run_hermetic
from hermetic_cli import ssh_env

from backends import Backend, SandboxSpec, create_backend
from control_plane.agent.agent import Agent
from control_plane.config.settings import load_settings
from control_plane.sandbox_manager import snapshot_store


def hermetic(root: Path, *args: str, stdin: str | None = None, backend: Backend | None = None) -> Any:
    env = {**os.environ, "HERMETIC_ROOT": str(root), **ssh_env(backend)}
    return run_hermetic(*args, env=env, stdin=stdin, timeout=300)


@pytest.mark.needs("cli")
def test_a_snapshot_made_by_one_process_starts_a_sandbox_in_another(backend: Backend, tmp_path: Path) -> None:
    name = backend.name
    made = hermetic(
        tmp_path,
        "sandbox", "shell", "--backend", name, "--snapshot", "built",
        stdin="mkdir -p app && cd app && echo hi > f.txt && export STAGE=7\n",
        backend=backend,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    snapshot_id = re.search(r"snapshot (snap-[0-9a-f]{12})", made.stderr).group(1)  # type: ignore[union-attr]
    listed = [*json.loads(hermetic(tmp_path, "snapshot", "list", "--json").stdout)]
    assert [(s["id"], s["label"], s["backend"]) for s in listed] == [(snapshot_id, "built", name)]
    assert listed[0]["holds"]["shell_sessions"] == ["default"] and listed[0]["bytes"] > 0

    used = hermetic(
        tmp_path, "sandbox", "shell", "--backend", name, "--from-snapshot", snapshot_id,
        stdin='echo "$(basename "$PWD") $(cat f.txt) $STAGE"\n', backend=backend,
    )  # fmt: skip
    assert used.returncode == 0 and used.stdout == "app hi 7\n", used.stderr

    assert hermetic(tmp_path, "snapshot", "label", snapshot_id, "release").returncode == 0
    shown = json.loads(hermetic(tmp_path, "snapshot", "show", snapshot_id).stdout)
    assert shown["label"] == "release" and "running processes" in shown["holds"]["not_kept"]
    table = hermetic(tmp_path, "snapshot", "list").stdout
    assert snapshot_id in table and "1 snapshots" in table

    removed = hermetic(tmp_path, "snapshot", "rm", snapshot_id, backend=backend)
    assert removed.returncode == 0, removed.stderr
    gone = hermetic(
        tmp_path,
        "sandbox",
        "exec",
        "--backend",
        name,
        "--from-snapshot",
        snapshot_id,
        "--",
        "true",
        backend=backend,
    )
    assert gone.returncode == 2 and f"no snapshot {snapshot_id}" in gone.stderr
    bad = hermetic(tmp_path, "snapshot", "show", "snap-nope")
    assert bad.returncode == 2 and "not a snapshot id" in bad.stderr


def test_sessions_checkpoints_rollback_and_fork_from_the_command_line(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load(
        [
            {"tool_calls": [call("write_file", path="a.txt", content="one\n")]},
            {"text": "done"},
            {"tool_calls": [call("write_file", path="a.txt", content="two\n")]},
            {"text": "done"},
        ]
    )
    agent = Agent(settings_for(tmp_path, fake_llm.url, backend="local"))
    conversation = agent.new_conversation(title="cli")
    run(conversation, "one")
    run(conversation, "two")
    conversation.close()
    agent.close()
    sid = conversation.id

    listed = hermetic(tmp_path, "sessions", "checkpoints", sid)
    assert listed.returncode == 0 and re.search(r"^\s*1\s.*write_file", listed.stdout, re.M), listed.stdout
    assert re.search(r"^\s*2\s.*write_file", listed.stdout, re.M)
    missing = hermetic(tmp_path, "sessions", "rollback", sid, "9")
    assert missing.returncode == 2 and "has no checkpoint 9 (it has: 1, 2)" in missing.stderr
    assert hermetic(tmp_path, "sessions", "rollback", sid, "2").returncode == 0
    forked = hermetic(tmp_path, "sessions", "fork", sid)
    assert forked.returncode == 0, forked.stderr
    fork_id = re.search(r"new session (\S+):", forked.stdout).group(1)  # type: ignore[union-attr]
    assert "starts from checkpoint 2" in forked.stdout

    settings = load_settings(root=tmp_path)
    again = Agent(settings_for(tmp_path, fake_llm.url, backend="local"))
    try:
        assert again.store.history(fork_id) == again.store.history(sid)
        pending = snapshot_store(settings).root / "pending"
        assert {p.stem for p in pending.glob("*.json")} == {sid, fork_id}
    finally:
        for snapshot in again.sandboxes.snapshots.list():
            again.sandboxes.backend.delete_snapshot(snapshot.id)
        again.close()


def test_doctor_counts_snapshots_and_warns_of_damaged_records(tmp_path: Path) -> None:
    local = create_backend("local")
    local.snapshots = snapshot_store(load_settings(root=tmp_path))
    with local.create(SandboxSpec()) as sb:
        sb.run("head -c 30000 /dev/zero > blob")
        snapshot = sb.snapshot()
    out = doctor(tmp_path).stdout
    assert status(out, "snapshots") == "ok" and re.search(r"1 snapshots, 3\d\.\d KB", out), out
    (local.snapshots.root / "snap-000000000000.json").write_text("{")
    out = doctor(tmp_path).stdout
    assert status(out, "snapshots") == "warn" and "1 damaged records" in out
    local.delete_snapshot(snapshot.id)
