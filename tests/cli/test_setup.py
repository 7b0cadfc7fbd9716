"""`hermetic setup` as a user meets it: under a pseudo-terminal and non-interactively, against the
scripted model server (which checks the key as a provider does)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest
import yaml
from dotenv import dotenv_values

from control_plane.models.fake_llm import FakeLLM

KEY = "sk-test-0123456789abcdef"
PROVIDER_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_") and k not in PROVIDER_KEYS}
    return {**clean, "HERMETIC_ROOT": str(tmp_path), "COLUMNS": "200", "TERM": "dumb", "NO_COLOR": "1"}


@pytest.fixture
def keyed_llm() -> Any:
    with FakeLLM([{"text": "OK"}], require_key=KEY) as server:
        yield server


def hermetic(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "control_plane", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_setup_at_a_terminal_checks_the_key_and_keeps_what_was_configured(
    tmp_path: Path, env: dict[str, str], keyed_llm: FakeLLM
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("# my own notes\nlimits:\n  max_iterations: 7  # kept on purpose\n")
    child = pexpect.spawn(
        sys.executable,
        ["-m", "control_plane", "setup"],
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 200),
        use_poll=True,  # select() fails on a descriptor above 1024, which a long suite reaches
    )
    child.expect("Provider")
    child.sendline("local")
    child.expect("Model")
    child.sendline("openai/scripted")
    child.expect("Server URL")
    child.sendline(keyed_llm.url)
    child.expect("HERMETIC_MODEL__API_KEY")
    child.sendline(KEY)
    child.expect("the model answered")
    child.expect("Sandbox backend")
    child.sendline("local")
    child.expect("ready")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before

    written = config.read_text()
    assert "# my own notes" in written and "# kept on purpose" in written, written
    data = yaml.safe_load(written)
    assert data["limits"] == {"max_iterations": 7}
    assert data["model"] == {"name": "openai/scripted", "api_base": keyed_llm.url}
    assert data["backend"] == "local"
    assert KEY not in written, "a key never goes into config.yaml"
    dotenv = tmp_path / ".env"
    assert stat.S_IMODE(dotenv.stat().st_mode) == 0o600
    assert KEY in dotenv.read_text()
    assert (tmp_path / "SOUL.md").read_text().startswith("# Persona")
    assert len(keyed_llm.requests) == 1, "one real request checked the key"


def test_setup_non_interactive_takes_its_answers_from_flags_and_the_environment(
    tmp_path: Path, env: dict[str, str], keyed_llm: FakeLLM
) -> None:
    env = {**env, "OPENAI_API_KEY": KEY}
    done = hermetic(
        "setup", "--non-interactive", "--provider", "openai", "--model", "openai/scripted",
        "--api-base", keyed_llm.url, "--backend", "local", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    data = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert data == {"model": {"name": "openai/scripted", "api_base": keyed_llm.url}, "backend": "local"}
    assert dotenv_values(tmp_path / ".env") == {"OPENAI_API_KEY": KEY}

    again = hermetic("setup", "--non-interactive", "--skip-check", env={**env, "OPENAI_API_KEY": ""})
    assert again.returncode == 0, again.stdout + again.stderr
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == data, "a re-run keeps what was set"


def test_a_failing_key_check_shows_the_providers_message_and_writes_nothing(
    tmp_path: Path, env: dict[str, str], keyed_llm: FakeLLM
) -> None:
    done = hermetic(
        "setup", "--non-interactive", "--provider", "local", "--model", "openai/scripted",
        "--api-base", keyed_llm.url, "--api-key", "sk-wrong-000000", "--backend", "local", env=env,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Incorrect API key provided" in done.stderr, done.stderr
    assert not (tmp_path / "config.yaml").exists() and not (tmp_path / ".env").exists()


def test_a_provider_key_is_required_without_a_terminal(tmp_path: Path, env: dict[str, str]) -> None:
    done = hermetic("setup", "--non-interactive", "--provider", "anthropic", "--backend", "local", env=env)
    assert done.returncode == 2
    assert "ANTHROPIC_API_KEY" in done.stderr
    assert not (tmp_path / "config.yaml").exists()
