"""`hermetic cron ...` as a user runs it (a subprocess), and the /cron routes of a served API whose
scheduler runs the jobs (as `hermetic serve` does)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import get_backend
from hermetic_cli import hermetic, scripted_env
from served_app import scripted_profiles, serve_app

from control_plane.api.app import create_app
from control_plane.store.tokens import TokenStore


@pytest.fixture
def env(tmp_path: Path, fake_llm: Any) -> dict[str, str]:
    get_backend("local")
    return scripted_env(tmp_path, fake_llm.url, HERMETIC_LEARNING__ENABLED="false")


def test_cron_commands_add_list_pause_resume_run_history_and_rm(
    env: dict[str, str], fake_llm: Any, tmp_path: Path
) -> None:
    added = hermetic("cron", "add", "every 2h", "check the build", "--deliver", "file:build.md", env=env)
    assert added.returncode == 0, added.stderr
    job_id = added.stdout.strip()
    assert job_id.startswith("j-") and "every 2h" in added.stderr
    listed = hermetic("cron", "list", env=env)
    assert job_id in listed.stdout and "active" in listed.stdout
    assert hermetic("cron", "pause", job_id, env=env).returncode == 0
    assert "paused" in hermetic("cron", "list", env=env).stdout
    assert hermetic("cron", "resume", job_id, env=env).returncode == 0
    fake_llm.load([{"text": "The build is green."}])
    ran = hermetic("cron", "run", job_id, env=env)
    assert ran.returncode == 0, ran.stderr
    assert "The build is green." in ran.stdout and "ok; session s-" in ran.stderr
    assert "The build is green." in (tmp_path / "deliveries" / "build.md").read_text()
    shown = hermetic("cron", "history", job_id, env=env)
    assert "ok" in shown.stdout and "file:build.md" in shown.stdout
    assert "check the build" in hermetic("cron", "show", job_id, env=env).stdout
    assert hermetic("cron", "rm", job_id, env=env).returncode == 0
    assert job_id not in hermetic("cron", "list", env=env).stdout


def test_cron_refuses_bad_input_with_the_reason_and_no_traceback(env: dict[str, str]) -> None:
    for args, message in [
        (("cron", "add", "every blue moon", "x"), "cannot read the duration"),
        (("cron", "add", "every 1h", "x", "--deliver", "smoke:signal"), "unknown kind"),
        (("cron", "add", "every 1h", "x", "--catch-up", "sometimes"), "catch_up"),
        (("cron", "pause", "j-nope"), "no job 'j-nope'"),
        (("cron", "run", "j-nope"), "no job 'j-nope'"),
    ]:
        done = hermetic(*args, env=env)
        assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.fixture
def api(tmp_path: Path, fake_llm: Any) -> Iterator[tuple[str, dict[str, str]]]:
    """A served API for profiles alpha and beta, its schedulers started by the app (as `hermetic serve`)."""
    get_backend("local")
    settings_for = scripted_profiles(tmp_path, fake_llm.url, learning={"enabled": False})
    tokens = TokenStore(tmp_path)
    issued = {name: tokens.create(name) for name in ("alpha", "beta")}
    for name in issued:
        settings_for(name)  # their homes exist on disk, so the server runs their schedulers
    with serve_app(create_app(tmp_path, settings_for)) as url:
        yield url, issued


def test_jobs_made_over_the_api_run_inside_the_server_and_stay_in_their_profile(
    api: tuple[str, dict[str, str]], fake_llm: Any
) -> None:
    url, tokens = api
    alpha = {"Authorization": f"Bearer {tokens['alpha']}"}
    beta = {"Authorization": f"Bearer {tokens['beta']}"}
    fake_llm.load([{"text": "tick"}] * 20)
    with httpx.Client(base_url=url, timeout=30) as client:
        made = client.post("/cron/jobs", json={"schedule": "every 1s", "prompt": "tick"}, headers=alpha)
        assert made.status_code == 201, made.text
        job = made.json()
        assert job["kind"] == "every" and job["next_run_at"] is not None
        deadline = time.monotonic() + 60
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not any(r["status"] == "ok" for r in runs):
            time.sleep(0.2)
            runs = client.get(f"/cron/jobs/{job['id']}/history", headers=alpha).json()
        assert any(r["status"] == "ok" and r["session_id"] for r in runs)
        paused = client.post(f"/cron/jobs/{job['id']}/pause", headers=alpha)
        assert paused.status_code == 200 and paused.json()["paused"] is True
        # another profile does not see it; bad input is a 4xx with the reason, never a 500
        assert client.get(f"/cron/jobs/{job['id']}", headers=beta).status_code == 404
        assert client.get("/cron/jobs", headers=beta).json() == []
        bad = client.post("/cron/jobs", json={"schedule": "sometime", "prompt": "x"}, headers=alpha)
        assert bad.status_code == 400 and "cannot read the schedule" in bad.json()["detail"]
        assert client.post("/cron/jobs", json={"schedule": "every 1h"}, headers=alpha).status_code == 422
        assert client.get("/cron/jobs").status_code == 401
        assert client.post("/cron/jobs/j-none/run", headers=alpha).status_code == 404

        def settled() -> list[dict[str, Any]]:
            """The history once no run holds the job's lease (one may have started before the pause)."""
            while client.get(f"/cron/jobs/{job['id']}", headers=alpha).json()["lease_owner"]:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            return client.get(f"/cron/jobs/{job['id']}/history", headers=alpha).json()

        before = len(settled())
        started = client.post(f"/cron/jobs/{job['id']}/run", headers=alpha)
        assert started.status_code == 202  # run now, although paused
        deadline = time.monotonic() + 60
        while len(runs := settled()) == before or runs[0]["status"] == "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert runs[0]["status"] == "ok"
        assert client.delete(f"/cron/jobs/{job['id']}", headers=alpha).status_code in (204, 200)
        assert client.get(f"/cron/jobs/{job['id']}", headers=alpha).status_code == 404
