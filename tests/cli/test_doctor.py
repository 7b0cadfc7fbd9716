"""`hermetic doctor` on this machine: real dockerd, images, bubblewrap, sqlite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from doctor_run import doctor, status


def test_rows_for_what_this_machine_has(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load([{"text": "OK"}])
    done = doctor(
        tmp_path, "--no-offline", HERMETIC_MODEL__API_BASE=fake_llm.url, HERMETIC_MODEL__API_KEY="k"
    )
    out = done.stdout
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:
        pytest.skip(f"dockerd is not running here ({exc}): start it (setup.sh)")
    assert status(out, "dockerd") == "ok" and "API 1." in out
    assert status(out, "backend docker") == "ok"
    assert status(out, "database") == "ok" and str(tmp_path / "hermetic.db") in out
    if Path("/usr/sbin/sshd").exists():
        assert status(out, "sshd") == "ok"
    assert status(out, "model") == "ok" and "openai/test-model answers" in out
    assert fake_llm.requests[0]["messages"][-1]["content"] == "Say OK"
    assert "Traceback" not in done.stderr + out
    assert done.returncode == (1 if "│ fail" in out else 0)


def test_unreachable_dockerd_fails_with_the_fix(tmp_path: Path) -> None:
    done = doctor(tmp_path, DOCKER_HOST=f"unix://{tmp_path}/no-such.sock")
    assert status(done.stdout, "dockerd") == "fail"
    assert "apt-get install docker.io" in done.stdout
    assert status(done.stdout, "image hermetic-sandbox:slim") == "skip"
    assert done.returncode == 1 and "Traceback" not in done.stderr


def test_no_model_explains_how_to_configure_one(tmp_path: Path) -> None:
    done = doctor(tmp_path, HERMETIC_MODEL__NAME="")
    assert status(done.stdout, "model") == "fail"
    fix = " ".join(done.stdout.replace("│", " ").split())  # the table wraps the fix over lines
    assert "no model configured" in fix and "run `hermetic setup`" in fix
    assert fix.index("hermetic setup") < fix.index("hermetic model set") < fix.index("HERMETIC_MODEL__NAME")
    assert done.returncode == 1


def test_model_without_its_key_fails_naming_the_variable(tmp_path: Path) -> None:
    done = doctor(tmp_path)  # openai/test-model, and no OPENAI_API_KEY anywhere
    assert status(done.stdout, "model") == "fail" and "OPENAI_API_KEY" in done.stdout
    assert done.returncode == 1


def test_missing_sandbox_image_fails_with_the_build_command(tmp_path: Path) -> None:
    image = "hermetic-sandbox:slim-000000000000"
    done = doctor(tmp_path, HERMETIC_SANDBOX__IMAGE=image)
    if status(done.stdout, "dockerd") != "ok":
        pytest.skip("dockerd is not running here: start it (setup.sh)")
    assert status(done.stdout, f"image {image}") == "fail"
    assert "hermetic image build --variant slim" in done.stdout
    assert done.returncode == 1
