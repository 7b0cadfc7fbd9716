"""What a new user tries first: everything a profile creates stays under HERMETIC_ROOT, and the model's
server is given with `--api-base` on `hermetic run` and `hermetic chat`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from conftest import get_backend
from hermetic_cli import hermetic

from control_plane.config.settings import load_settings
from control_plane.sandbox_manager import SandboxManager


def test_local_workspaces_stay_under_hermetic_root(tmp_path: Path, monkeypatch: Any) -> None:
    get_backend("local")
    monkeypatch.setenv("HERMETIC_ROOT", str(tmp_path / "root"))
    manager = SandboxManager(load_settings(backend="local"))
    try:
        sandbox = manager.get("s-where")
        workspace = sandbox.run("pwd")["output"].strip()
        created = [p.name for p in (tmp_path / "root" / "sandboxes").iterdir()]
        assert sandbox.id in created, (workspace, created)
    finally:
        manager.close_all()


def test_sandbox_root_moves_them(tmp_path: Path) -> None:
    get_backend("local")
    manager = SandboxManager(
        load_settings(root=tmp_path / "root", backend="local", sandbox={"root": tmp_path / "x"})
    )
    try:
        sandbox = manager.get("s-where")
        assert [p.name for p in (tmp_path / "x").iterdir()] == [sandbox.id]
        assert not (tmp_path / "root" / "sandboxes").exists()
    finally:
        manager.close_all()


def test_api_base_flag_on_run_and_chat(tmp_path: Path, fake_llm: Any) -> None:
    get_backend("local")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")}
    env |= {
        "HERMETIC_ROOT": str(tmp_path),
        "HERMETIC_BACKEND": "local",
        "HERMETIC_MODEL__API_KEY": "k-123456",
    }
    env |= {"HERMETIC_MODEL__RETRIES": "0", "COLUMNS": "200"}
    fake_llm.load([{"text": "ran through the flag"}, {"text": "chatted through the flag"}])
    done = hermetic("run", "--model", "openai/scripted", "--api-base", fake_llm.url, "say hi", env=env)
    assert done.returncode == 0, done.stderr
    assert "ran through the flag" in done.stdout
    env["HERMETIC_MODEL__NAME"] = "openai/scripted"  # the name from the environment, the server from the flag
    chatted = hermetic("chat", "--api-base", fake_llm.url, env=env, stdin="hello\n")
    assert chatted.returncode == 0, chatted.stderr
    assert "chatted through the flag" in chatted.stdout
    assert len(fake_llm.requests) == 2
