"""The one-line status: printed when `hermetic run` and `chat` start, and in /health for a token holder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from conftest import get_backend
from served_app import serve_app

from control_plane.api.app import create_app
from control_plane.config.settings import load_settings
from control_plane.store.tokens import TokenStore


def test_run_and_chat_open_with_the_status_line(tmp_path: Path, fake_llm: Any) -> None:
    get_backend("local")
    (tmp_path / "MEMORY.md").write_text("x" * 1100)  # half of the 2,200-character limit
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")},
        "HERMETIC_ROOT": str(tmp_path),
        "HERMETIC_MODEL__NAME": "openai/scripted",
        "HERMETIC_MODEL__API_BASE": fake_llm.url,
        "HERMETIC_MODEL__API_KEY": "test-key-abcdef",
        "HERMETIC_BACKEND": "local",
        "COLUMNS": "300",
    }
    fake_llm.load([{"text": "hi"}, {"text": "hello"}])
    line = (
        "profile default · model openai/scripted · backend local · "
        "memory MEMORY.md 50%, USER.md 0% · 0 skills"
    )
    for args, stdin in ((["run", "greet"], None), (["chat"], "hello\n")):
        done = subprocess.run(
            [sys.executable, "-m", "control_plane", *args],
            input=stdin, capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert line in done.stderr, done.stderr


def test_health_adds_the_profile_status_for_a_token_holder(tmp_path: Path, fake_llm: Any) -> None:
    get_backend("local")
    model = {"name": "openai/scripted", "api_base": fake_llm.url, "api_key": "k-123456"}
    token = TokenStore(tmp_path).create("alpha")
    app = create_app(tmp_path, lambda name: load_settings(name, root=tmp_path, model=model, backend="local"))
    with serve_app(app) as base:
        url = f"{base}/health"
        anonymous = httpx.get(url).json()
        assert anonymous["status"] == "ok" and anonymous.get("profile") is None
        assert httpx.get(url, headers={"Authorization": "Bearer wrong"}).json().get("profile") is None
        mine = httpx.get(url, headers={"Authorization": f"Bearer {token}"}).json()["profile"]
        assert (
            mine["profile"] == "alpha" and mine["model"] == "openai/scripted" and mine["backend"] == "local"
        )
        assert mine["skills"] == 0 and mine["memory_percent"] == {"MEMORY.md": 0.0, "USER.md": 0.0}
