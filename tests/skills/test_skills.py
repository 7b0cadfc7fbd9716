"""The skill library: the agent writes skills through the tools, versions, rollback, retrieval, curation,
the CLI and API, and the skills shipped in the repository.
Every verification goes through the real gate (control_plane/skills/gate.py) in throwaway sandboxes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from agent_runs import call
from fastapi.testclient import TestClient
from skill_kit import FAILING, PASSING, add, docker, library_at, skill_md
from skills_ref.validator import validate
from typer.testing import CliRunner

from control_plane.agent.agent import Agent
from control_plane.api.app import create_app
from control_plane.cli.main import app as cli_app
from control_plane.config.settings import Settings, load_settings
from control_plane.events import Event
from control_plane.skills.format import parse_skill
from control_plane.skills.gate import verify as gate_verify
from control_plane.skills.library import DAY, UnknownSkill
from control_plane.skills.model import GatePolicy, Verdict
from control_plane.store.tokens import TokenStore

REPO_SKILLS = Path(__file__).parents[2] / "control_plane" / "skills" / "examples"


# -- the agent writes skills -------------------------------------------------------------------


def agent_for(root: Path, url: str) -> Agent:
    settings = load_settings(
        root=root,
        model={"name": "openai/scripted", "api_base": url, "api_key": "k", "retries": 0},
        backend="local",
        toolsets=["skills"],
        learning={"enabled": False},
    )
    return Agent(settings)


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def run(agent: Agent, text: str) -> str:
    conversation = agent.new_conversation()
    events: list[Event] = []
    asyncio.run(conversation.run(text, events.append))
    return conversation.id


def test_agent_writes_a_skill_whose_check_passes(tmp_path: Path, fake_llm: Any) -> None:
    create = call(
        "skill_manage",
        action="create",
        name="answer-check",
        content=skill_md("answer-check", "Check that the answer is 42."),
        files={"scripts/verify.sh": PASSING},
    )
    fake_llm.load([{"tool_calls": [create]}, {"tool_calls": [call("skills_list")]}, {"text": "saved"}])
    agent = agent_for(tmp_path, fake_llm.url)
    session = run(agent, "remember how to check the answer")

    merged, listing = tool_results(fake_llm.requests[-1])
    assert "merged as version 1" in merged and "verify.sh: ok" in merged and "answer-ok" in merged
    assert listing.startswith("answer-check (v1): Check that the answer is 42.")
    root = tmp_path / "skills"
    assert (root / "library/answer-check/scripts/verify.sh").read_text() == PASSING
    assert (root / "versions/answer-check/1/SKILL.md").is_file()
    assert not (root / "quarantine/answer-check").exists()
    assert validate(root / "library/answer-check") == []
    [verdict] = agent.skills.verdicts("answer-check")
    assert (verdict["status"], verdict["proposer"], verdict["session_id"]) == ("pass", "agent", session)
    assert verdict["checks"][-1]["name"] == "verify.sh" and verdict["image"]
    # the next session's system prompt lists it; a run that loads it counts as a use and a success
    assert "- answer-check: Check that the answer is 42." in agent.system_prompt()
    fake_llm.load([{"tool_calls": [call("skill_view", name="answer-check")]}, {"text": "checked"}])
    run(agent, "check the answer")
    info = agent.skills.info("answer-check")
    assert (info.uses, info.successes, info.failures) == (1, 1, 0)
    agent.close()


def test_a_failing_check_keeps_the_candidate_in_quarantine_until_fixed(tmp_path: Path, fake_llm: Any) -> None:
    create = call(
        "skill_manage",
        action="create",
        name="answer-check",
        content=skill_md("answer-check", "Check that the answer is 42."),
        files={"scripts/verify.sh": FAILING},
    )
    fix = call(
        "skill_manage", action="write_file", name="answer-check", file="scripts/verify.sh", content=PASSING
    )
    fake_llm.load([{"tool_calls": [create]}, {"tool_calls": [fix]}, {"text": "fixed"}])
    agent = agent_for(tmp_path, fake_llm.url)
    run(agent, "save the check")

    failed, merged = tool_results(fake_llm.requests[-1])
    assert "NOT merged" in failed and "verify.sh: exit code 1" in failed and "expected 42, got 41" in failed
    assert "merged as version 1" in merged
    statuses = [v["status"] for v in agent.skills.verdicts("answer-check")]
    assert statuses == ["fail", "pass"]
    assert agent.skills.info("answer-check").version == 1
    agent.close()


def test_a_failing_change_leaves_the_current_version_in_place(tmp_path: Path) -> None:
    library = library_at(tmp_path)
    add(library, "answer-check", "Check that the answer is 42.")
    library.write("answer-check", "scripts/verify.sh", FAILING)
    assert library.submit("answer-check", proposer="test").version is None
    assert (tmp_path / "skills/library/answer-check/scripts/verify.sh").read_text() == PASSING
    assert (tmp_path / "skills/quarantine/answer-check/scripts/verify.sh").read_text() == FAILING


def test_bad_requests_are_refused_and_change_nothing(tmp_path: Path) -> None:
    library = library_at(tmp_path)
    add(library, "answer-check", "Check that the answer is 42.")
    for bad in ("../escape.sh", "/etc/passwd", ""):
        with pytest.raises(ValueError, match="relative path inside the skill"):
            library.write("answer-check", bad, "x")
    with pytest.raises(ValueError, match="exists"):
        library.write("answer-check", "SKILL.md", "x", new=True)
    with pytest.raises(ValueError, match="not a skill name"):
        library.write("Bad_Name", "SKILL.md", "x", new=True)
    with pytest.raises(UnknownSkill):
        library.view("nope")
    assert not (tmp_path / "skills/escape.sh").exists() and not (tmp_path / "escape.sh").exists()


def test_no_checks_fail_unless_the_policy_allows_unverified(tmp_path: Path) -> None:
    strict = library_at(tmp_path / "a")
    strict.write("notes", "SKILL.md", skill_md("notes", "Some notes."), new=True)
    submission = strict.submit("notes", proposer="test")
    assert submission.version is None and submission.verdict.reasons[0].startswith("no checks:")
    lenient = library_at(tmp_path / "b", allow_unverified=True)
    lenient.write("notes", "SKILL.md", skill_md("notes", "Some notes."), new=True)
    assert lenient.submit("notes", proposer="test").version == 1
    assert "- notes [unverified]: Some notes." in lenient.skills_prompt("")


# -- history ---------------------------------------------------------------------------------------


def test_history_diff_and_rollback(tmp_path: Path) -> None:
    library = library_at(tmp_path)
    add(library, "deploy-app", "Deploy the app.", body="Run make deploy.")
    library.patch("deploy-app", "SKILL.md", "make deploy", "make release")
    assert library.submit("deploy-app", proposer="test").version == 2

    diff = library.diff("deploy-app", 1)
    assert "-Run make deploy." in diff and "+Run make release." in diff and "deploy-app@2/SKILL.md" in diff
    assert library.rollback("deploy-app", 1) == 3
    assert "Run make deploy." in library.view("deploy-app")
    assert library.diff("deploy-app", 1, 3) == ""
    notes = [(row["version"], row["note"], row["verdict"]["status"]) for row in library.history("deploy-app")]
    assert notes == [
        (1, "proposed by test", "pass"),
        (2, "proposed by test", "pass"),
        (3, "rollback to version 1", "pass"),
    ]
    with pytest.raises(UnknownSkill, match="no version 9"):
        library.rollback("deploy-app", 9)


def test_reverification_marks_a_skill_that_no_longer_passes(tmp_path: Path) -> None:
    library = library_at(tmp_path)
    add(library, "answer-check", "Check that the answer is 42.")
    add(library, "other", "Another skill.")
    # what changed under the skill: the verification environment (an upgraded image, simulated)
    library._verify = lambda candidate, policy, backend, pool: (
        gate_verify(candidate, policy, backend, pool)
        if candidate.name == "other"
        else Verdict(candidate.name, "fail", ["verify.sh: exit code 127"])
    )
    assert [v.status for v in library.reverify_all()] == ["fail", "pass"]
    assert library.info("answer-check").status == "fail"
    assert "- answer-check [fail]: Check" in library.skills_prompt("")
    assert [v["proposer"] for v in library.verdicts("answer-check")] == ["test", "reverify"]


# -- retrieval and curation --------------------------------------------------------------------


def test_listing_over_budget_ranks_by_relevance_weighted_by_smoothed_success(tmp_path: Path) -> None:
    library = library_at(tmp_path, list_max=100)  # listed in the system prompt, within its token budget
    for i in range(40):
        add(library, f"filler-{i}", f"Unrelated procedure number {i} about gardening and cooking.")
    add(library, "postgres-backup-lucky", "Back up a PostgreSQL database with pg_dump.")
    add(library, "postgres-backup-proven", "Back up a PostgreSQL database with pg_dump.")
    for i in range(1):
        library.mark_loaded("postgres-backup-lucky", f"lucky-{i}")
        library.record_outcome(f"lucky-{i}", success=True)
    for i in range(50):
        library.mark_loaded("postgres-backup-proven", f"proven-{i}")
        assert library.record_outcome(f"proven-{i}", success=i % 10 != 0) == ["postgres-backup-proven"]

    lucky, proven = library.info("postgres-backup-lucky"), library.info("postgres-backup-proven")
    assert lucky.success_rate < proven.success_rate  # 1/1 does not beat 45/50
    ranked = [info.name for info in library.ranked("back up the postgresql database")]
    assert ranked[:2] == ["postgres-backup-proven", "postgres-backup-lucky"]

    prompt = library.skills_prompt("back up the postgresql database", budget_tokens=100)
    assert len(prompt) <= 400
    assert "postgres-backup-proven" in prompt and "filler-" not in prompt.split("\n")[1]
    assert prompt.endswith("skills_list shows them all)")
    everything = library.skills_prompt("anything", budget_tokens=10_000)
    assert everything.count("\n- ") == 42


def test_loads_count_once_per_session_and_outcomes_go_to_loaded_skills(tmp_path: Path) -> None:
    library = library_at(tmp_path)
    add(library, "answer-check", "Check that the answer is 42.")
    library.view("answer-check", session_id="s1")
    library.view("answer-check", "scripts/verify.sh", session_id="s1")
    assert library.record_outcome("s1", success=False) == ["answer-check"]
    assert library.record_outcome("s1", success=True) == []  # already counted
    info = library.info("answer-check")
    assert (info.uses, info.successes, info.failures) == (1, 0, 1)


def test_curation_marks_stale_then_archives_and_leaves_pinned_alone(tmp_path: Path) -> None:
    library = library_at(tmp_path, stale_days=30, archive_days=90)
    for name in ("old-one", "pinned-one", "fresh-one"):
        add(library, name, f"The {name}.")
    library.pin("pinned-one")
    now = time.time()
    stale = library.curate(now + 40 * DAY)
    assert stale == ["fresh-one: stale (unused for 40 days)", "old-one: stale (unused for 40 days)"]
    assert library.info("old-one").state == "stale" and library.info("pinned-one").state == "active"
    library.mark_loaded("fresh-one", "later")  # use wakes a stale skill
    assert library.info("fresh-one").state == "active"
    archived = library.curate(now + 100 * DAY)
    assert archived == [
        "fresh-one: archived (unused for 100 days)",
        "old-one: archived (unused for 100 days)",
    ]
    assert not (tmp_path / "skills/library/old-one").exists()
    assert (tmp_path / "skills/archive/old-one/SKILL.md").is_file()
    assert [s.name for s in library.list_skills()] == ["pinned-one"]
    library.restore("old-one")
    assert library.info("old-one").state == "active" and (tmp_path / "skills/library/old-one").is_dir()


# -- CLI and API -------------------------------------------------------------------------------------


def test_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMETIC_ROOT", str(tmp_path))
    library = library_at(tmp_path)
    add(library, "deploy-app", "Deploy the app.", body="Run make deploy.")
    library.patch("deploy-app", "SKILL.md", "make deploy", "make release")
    library.submit("deploy-app", proposer="test")
    library.close()
    runner = CliRunner()

    def cli(*args: str, code: int = 0) -> str:
        result = runner.invoke(cli_app, ["skills", *args])
        assert result.exit_code == code, result.output
        return result.output

    assert "deploy-app" in cli("list") and "pass" in cli("list")
    assert "Run make release." in cli("show", "deploy-app")
    assert "+Run make release." in cli("diff", "deploy-app", "1")
    assert "version 3 is version 1 again" in cli("rollback", "deploy-app", "1")
    assert "rollback" in cli("history", "deploy-app")
    assert "pinned" in cli("pin", "deploy-app")
    cli("archive", "deploy-app")
    assert "deploy-app" not in cli("list") and "archived" in cli("list", "--archived")
    cli("restore", "deploy-app")
    assert "no skill named 'nope'" in cli("show", "nope", code=1)
    assert "give a skill name or --all" in cli("verify", code=2)


def test_api(tmp_path: Path) -> None:
    def settings_for(profile: str) -> Settings:
        return load_settings(profile, root=tmp_path, backend="local")

    token = TokenStore(tmp_path).create("default")
    app = create_app(tmp_path, settings_for)
    with TestClient(app) as client:
        client.headers["Authorization"] = f"Bearer {token}"
        agent = app.state.hub.profile("default").agent
        add(agent.skills, "deploy-app", "Deploy the app.", body="Run make deploy.")
        agent.skills.patch("deploy-app", "SKILL.md", "make deploy", "make release")
        agent.skills.submit("deploy-app", proposer="test")

        assert [s["name"] for s in client.get("/skills").json()] == ["deploy-app"]
        assert "make release" in client.get("/skills/deploy-app").json()["content"]
        assert "+Run make release." in client.get("/skills/deploy-app/diff", params={"old": 1}).json()["diff"]
        assert client.post("/skills/deploy-app/rollback", json={"version": 1}).json() == {"version": 3}
        assert len(client.get("/skills/deploy-app/history").json()["versions"]) == 3
        assert client.post("/skills/deploy-app/verify").json()["status"] == "pass"
        assert client.post("/skills/deploy-app/pin", json={"pinned": True}).json() == {"pinned": True}
        assert client.post("/skills/deploy-app/archive").status_code == 200
        assert client.get("/skills", params={"archived": True}).json()[0]["state"] == "archived"
        assert client.get("/skills/nope").status_code == 404
        assert client.post("/skills/deploy-app/archive").status_code == 400
        assert client.get("/skills", headers={"Authorization": "Bearer wrong"}).status_code == 401


# -- the skills shipped in the repository ------------------------------------------------------------


@pytest.mark.parametrize("skill", sorted(p.name for p in REPO_SKILLS.iterdir() if p.is_dir()))
def test_repository_skills_are_valid_and_pass_their_checks(skill: str) -> None:
    assert validate(REPO_SKILLS / skill) == []
    assert parse_skill(REPO_SKILLS / skill).name == skill
    verdict = gate_verify(REPO_SKILLS / skill, GatePolicy(), docker())
    assert verdict.status == "pass", verdict.checks
