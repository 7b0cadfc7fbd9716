"""The learning loop closes on skills: a skill that failed is reviewed and repaired through the gate,
one that keeps failing is retired, near-duplicates are merged (and the merge undone). The reviewer is
the scripted model; every verification runs the real gate in a throwaway local sandbox."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agent_runs import call
from conftest import get_backend
from skill_kit import BODY, FAILING, PASSING, add, library_at, skill_md
from typer.testing import CliRunner

from control_plane.agent.agent import Agent
from control_plane.cli.main import app as cli_app
from control_plane.config.settings import load_settings
from control_plane.events import Event
from control_plane.skills.curation import due_reviews, duplicates, similarity


def agent_for(root: Path, url: str, **model: Any) -> Agent:
    get_backend("local")
    settings = load_settings(
        root=root,
        model={"name": "openai/scripted", "api_base": url, "api_key": "k", "retries": 0, **model},
        backend="local",
        toolsets=["skills"],
    )
    return Agent(settings)


def turn(agent: Agent, text: str, conversation: Any = None) -> Any:
    conversation = conversation or agent.new_conversation()
    events: list[Event] = []
    asyncio.run(conversation.run(text, events.append))
    return conversation


def failing_turn_then(agent: Agent, fake_llm: Any, review: list[dict[str, Any]]) -> None:
    """A turn that loads answer-check and ends in a model error; then the reviewer's script."""
    fake_llm.load([{"tool_calls": [call("skill_view", name="answer-check")]}, {"error": 500}, *review])
    turn(agent, "check the answer")
    agent.background.close()  # the review runs after the turn, in the background: wait for it


def test_a_skill_loaded_in_a_failing_turn_gets_a_repair_that_passes_the_gate(
    tmp_path: Path, fake_llm: Any
) -> None:
    agent = agent_for(tmp_path, fake_llm.url)
    add(agent.skills, "answer-check", "Check that the answer is 42.", BODY)
    repair = call(
        "skill_manage", action="patch", name="answer-check", old="Steps:", new="Steps (run verify.sh first):",
        reason="the steps did not say to run the check first",
    )  # fmt: skip
    failing_turn_then(agent, fake_llm, [{"tool_calls": [repair]}, {"text": "repaired"}])

    info = agent.skills.info("answer-check")
    assert (info.version, info.failures, info.streak) == (2, 1, 0), "a passing new version resets the streak"
    latest = agent.skills.history("answer-check")[-1]
    assert latest["note"] == "proposed by review: the steps did not say to run the check first"
    assert latest["verdict"]["status"] == "pass" and latest["verdict"]["proposer"] == "review"
    assert "Steps (run verify.sh first):" in agent.skills.view("answer-check")
    review_request = fake_llm.requests[2]
    assert "Skill under review: answer-check" in review_request["messages"][1]["content"]
    assert "ended in failure" in review_request["messages"][1]["content"]
    reviews = [s for s in agent.store.list_sessions("default", limit=10) if s.source == "review"]
    assert [r.title for r in reviews] == ["review of skill answer-check"]
    agent.close()


def test_a_repair_that_fails_its_checks_stays_out(tmp_path: Path, fake_llm: Any) -> None:
    agent = agent_for(tmp_path, fake_llm.url)
    add(agent.skills, "answer-check", "Check that the answer is 42.", BODY)
    before = agent.skills.view("answer-check")
    broken = call(
        "skill_manage", action="write_file", name="answer-check", file="scripts/verify.sh", content=FAILING,
        reason="tighten the check",
    )  # fmt: skip
    failing_turn_then(agent, fake_llm, [{"tool_calls": [broken]}, {"text": "could not repair"}])

    assert agent.skills.info("answer-check").version == 1
    assert agent.skills.view("answer-check") == before
    refused = agent.skills.verdicts("answer-check")[-1]
    assert refused["status"] == "fail" and refused["proposer"] == "review"
    assert "proposed because: tighten the check" in refused["reasons"]
    assert not (tmp_path / "skills/quarantine/answer-check").exists(), "the refused repair is not left behind"
    agent.close()


@pytest.mark.parametrize(
    "failure", [{"error": 500}, {"text": "late", "delay": 3}], ids=["model-error", "timeout"]
)
def test_a_reviewer_failure_leaves_the_library_untouched(
    tmp_path: Path, fake_llm: Any, failure: dict[str, Any]
) -> None:
    agent = agent_for(tmp_path, fake_llm.url, timeout=1)
    add(agent.skills, "answer-check", "Check that the answer is 42.", BODY)
    verdicts = len(agent.skills.verdicts("answer-check"))
    failing_turn_then(agent, fake_llm, [failure])
    assert len(fake_llm.requests) == 3, "the review asked the model"
    info = agent.skills.info("answer-check")
    assert (info.version, info.state, info.failures) == (1, "active", 1)
    assert len(agent.skills.verdicts("answer-check")) == verdicts
    assert not (tmp_path / "skills/quarantine/answer-check").exists()
    agent.close()


def test_a_correction_by_the_user_counts_the_last_turns_skill_as_failed(
    tmp_path: Path, fake_llm: Any
) -> None:
    agent = agent_for(tmp_path, fake_llm.url)
    add(agent.skills, "answer-check", "Check that the answer is 42.", BODY)
    fake_llm.load(
        [
            {"tool_calls": [call("skill_view", name="answer-check")]},
            {"text": "the answer is 41"},
            {"text": "sorry"},
        ]
        + [{"text": "skill is fine"}]
    )
    conversation = turn(agent, "check the answer")
    assert agent.skills.info("answer-check").successes == 1
    turn(agent, "no, that's wrong: it is 42", conversation)
    agent.background.close()
    info = agent.skills.info("answer-check")
    assert (info.successes, info.failures) == (0, 1)
    assert "the user corrected the agent" in fake_llm.requests[3]["messages"][1]["content"]
    agent.close()


def test_ten_failures_in_a_row_retire_a_skill_until_a_passing_version_or_a_restore(tmp_path: Path) -> None:
    get_backend("local")
    library = library_at(tmp_path)
    add(library, "answer-check", "Check that the answer is 42.")

    def runs(*outcomes: bool) -> None:
        for number, ok in enumerate(outcomes):
            session = f"s{library.info('answer-check').runs}-{number}"
            library.mark_loaded("answer-check", session)
            library.record_outcome(session, ok)

    runs(*[False] * 9, True, *[False] * 9)
    assert library.info("answer-check").state == "active", "a success in between resets the streak"
    runs(False)
    info = library.info("answer-check")
    assert (info.state, info.streak) == ("failing", 10)
    assert "answer-check" not in library.skills_prompt("check the answer"), "left out of the prompt"
    assert "failing" in info.marks and [s.name for s in library.list_skills()] == ["answer-check"], (
        "not deleted"
    )

    library.restore("answer-check")
    assert library.info("answer-check").state == "active" and "answer-check" in library.skills_prompt("")
    runs(*[False] * 10)
    library.patch("answer-check", "SKILL.md", "steps", "better steps")
    assert library.submit("answer-check", proposer="test").version == 2
    assert (library.info("answer-check").state, library.info("answer-check").streak) == ("active", 0)
    library.close()


def test_a_sinking_success_rate_gets_a_review_without_a_fresh_failure(tmp_path: Path) -> None:
    get_backend("local")
    library = library_at(tmp_path, min_runs=3, review_below=0.5)
    add(library, "answer-check", "Check that the answer is 42.")
    for number, ok in enumerate([False, False, True]):
        library.mark_loaded("answer-check", f"s{number}")
        library.record_outcome(f"s{number}", ok)
    [due] = due_reviews(library, ["answer-check"], False, "unused")
    assert due.reason == "its success rate is 44% over 3 runs"
    assert due_reviews(library, ["answer-check"], False, "unused") == [], (
        "not again before min_runs more runs"
    )
    library.close()


def test_near_duplicates_are_merged_through_the_gate_and_the_merge_rolled_back(
    tmp_path: Path, fake_llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_backend("local")
    for name, value in {
        "HERMETIC_ROOT": str(tmp_path), "HERMETIC_BACKEND": "local", "HERMETIC_TOOLSETS": "skills",
        "HERMETIC_MODEL__NAME": "openai/scripted", "HERMETIC_MODEL__API_BASE": fake_llm.url,
        "HERMETIC_MODEL__API_KEY": "k-123456", "HERMETIC_MODEL__RETRIES": "0", "COLUMNS": "250",
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HERMETIC_PROFILE", raising=False)
    library = library_at(tmp_path)
    add(library, "answer-check", "Check that the answer is 42.", BODY)
    add(library, "check-answer", "Checks that the answer is 42.", BODY + " Then report it.")
    add(library, "disk-usage", "Report the largest directories.", "Run du -sh on each directory and sort.")
    [pair] = duplicates(library)
    assert (pair.a, pair.b) == ("answer-check", "check-answer") and pair.similarity >= 0.6
    assert similarity(BODY, "Run du -sh on each directory and sort.") < 0.1
    original = library.view("answer-check")
    library.close()

    runner = CliRunner()
    shown = runner.invoke(cli_app, ["skills", "curate"])
    assert "answer-check + check-answer: near-duplicates" in shown.output and "--apply" in shown.output
    merged_md = skill_md("answer-check", "Check that the answer is 42, and report it.", BODY + " Report it.")
    merge = call(
        "skill_manage", action="merge", name="answer-check", sources=["answer-check", "check-answer"],
        content=merged_md, files={"scripts/verify.sh": PASSING}, reason="the same check twice",
    )  # fmt: skip
    fake_llm.load([{"tool_calls": [merge]}, {"text": "merged them"}])
    applied = runner.invoke(cli_app, ["skills", "curate", "--apply"])
    assert applied.exit_code == 0, applied.output
    assert (
        "merged them" in applied.output
        and "merged as version 2" in fake_llm.requests[-1]["messages"][-1]["content"]
    )

    library = library_at(tmp_path)
    assert library.info("answer-check").version == 2
    gone = library.info("check-answer")
    assert (gone.state, gone.merged_into) == ("archived", "answer-check")
    assert [s.name for s in library.list_skills()] == ["answer-check", "disk-usage"]
    listed = runner.invoke(cli_app, ["skills", "list", "--archived"]).output
    assert "merged into answer-check" in listed

    undone = runner.invoke(cli_app, ["skills", "unmerge", "answer-check"])
    assert undone.exit_code == 0, undone.output
    assert "check-answer: restored" in undone.output
    assert library.info("check-answer").state == "active" and library.info("check-answer").merged_into is None
    assert library.info("answer-check").version == 3 and library.view("answer-check") == original
    library.close()
