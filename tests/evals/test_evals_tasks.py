"""Evaluation tasks and suites as files (the Harbor layout), and the run's arithmetic: pass@k, the
summary's separation of infrastructure failures, the paired bootstrap, results.jsonl after a crash."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from control_plane.evals import (
    BUILTIN,
    AttemptResult,
    Filters,
    ResultsFile,
    SuiteError,
    Task,
    TaskError,
    compare,
    load_suite,
    load_task,
    pass_at_k,
    resolve,
    summarize,
)
from control_plane.evals.environment import base_images


def write_task(
    root: Path, name: str, toml: str = "", instruction: str | None = "Do it.", tests: bool = True
) -> Path:
    task = root / name
    (task / "tests").mkdir(parents=True)
    if instruction is not None:
        (task / "instruction.md").write_text(instruction)
    if toml:
        (task / "task.toml").write_text(toml)
    if tests:
        (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return task


def test_a_harbor_task_is_read_with_its_settings_and_unknown_keys_kept(tmp_path: Path) -> None:
    path = write_task(
        tmp_path,
        "t1",
        'version = "1.0"\nsource = "tb2"\n'
        '[metadata]\ndifficulty = "hard"\ntags = ["git", "x"]\nowner = "me"\n'
        '[verifier]\ntimeout_sec = 12.5\nenv = { MODE = "strict" }\n[agent]\ntimeout_sec = 30\n'
        '[environment]\ncpus = 2\nmemory = "4G"\nstorage_mb = 100\ngpus = 1\nallow_internet = true\n'
        'allow = ["pypi.org"]\n[solution]\nenv = { K = "v" }\n',
    )
    task = load_task(path)
    assert isinstance(task, Task), task
    config = task.config
    assert (config.verifier.timeout_sec, config.verifier.env, config.agent.timeout_sec) == (
        12.5,
        {"MODE": "strict"},
        30,
    )
    assert (config.environment.cpus, config.environment.memory_mb, config.environment.storage_mb) == (
        2,
        4096,
        100,
    )
    assert config.environment.allow_internet and config.environment.allow == ["pypi.org"]
    assert task.tags == ["git", "x"] and config.metadata.difficulty == "hard"
    assert config.unknown_keys == ["source", "environment.gpus"]  # metadata is free-form: never "unknown"
    assert config.model_extra == {"source": "tb2"} and config.metadata.model_extra == {"owner": "me"}
    assert task.oracle is None and task.dockerfile is None


@pytest.mark.parametrize(
    ("kwargs", "file", "reason"),
    [
        ({"instruction": None}, "instruction.md", "missing"),
        ({"instruction": "  \n"}, "instruction.md", "empty"),
        ({"toml": "[agent\ntimeout_sec = 1"}, "task.toml", "not valid TOML"),
        ({"toml": '[verifier]\ntimeout_sec = "soon"'}, "task.toml", "verifier.timeout_sec"),
        ({"toml": "[agent]\ntimeout_sec = -5"}, "task.toml", "agent.timeout_sec"),
        ({"toml": '[environment]\nmemory = "lots"'}, "task.toml", "not a size"),
        ({"tests": False}, "tests/test.sh", "missing"),
    ],
)
def test_an_unreadable_task_names_the_file_and_the_reason(
    tmp_path: Path, kwargs: dict[str, object], file: str, reason: str
) -> None:
    found = load_task(write_task(tmp_path, "bad", **kwargs))  # type: ignore[arg-type]
    assert isinstance(found, TaskError)
    assert found.file == file and reason in found.reason, found


def test_a_suite_keeps_its_readable_tasks_and_lists_the_others(tmp_path: Path) -> None:
    write_task(tmp_path, "alpha-one", '[metadata]\ntags = ["shell"]')
    write_task(tmp_path, "alpha-two", '[metadata]\ntags = ["git"]')
    write_task(tmp_path, "beta", '[metadata]\ntags = ["shell", "long"]')
    write_task(tmp_path, "broken", instruction=None)
    (tmp_path / ".hidden").mkdir()
    suite = load_suite(tmp_path)
    assert [t.id for t in suite.tasks] == ["alpha-one", "alpha-two", "beta"]
    assert [str(e) for e in suite.errors] == [
        "broken: instruction.md: missing: a task needs an instruction for the agent"
    ]
    ids = lambda f: [t.id for t in load_suite(tmp_path, f).tasks]  # noqa: E731
    assert ids(Filters(include=("alpha-*",))) == ["alpha-one", "alpha-two"]
    assert ids(Filters(include=("alpha-*",), exclude=("*-two",))) == ["alpha-one"]
    assert ids(Filters(tags=("shell",))) == ["alpha-one", "beta"]
    assert ids(Filters(tags=("long", "git"))) == ["alpha-two", "beta"]
    assert load_suite(tmp_path, Filters(include=("beta",))).errors == []  # filtered out, not reported
    assert [t.id for t in load_suite(tmp_path / "beta").tasks] == ["beta"]  # one task is a suite too


def test_a_suite_from_a_git_repository_at_a_ref_and_a_missing_one(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write_task(repo / "tasks", "from-git")
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "tasks"], ["tag", "v1"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True)
    root = resolve(f"{repo}#v1:tasks", cache=tmp_path)
    assert [t.id for t in load_suite(root).tasks] == ["from-git"]
    with pytest.raises(SuiteError, match="no such file or directory"):
        resolve(str(tmp_path / "nowhere"))
    with pytest.raises(SuiteError, match="no such directory"):
        load_suite(tmp_path / "nowhere")


def test_the_builtin_suite_reads_whole() -> None:
    suite = load_suite(BUILTIN)
    assert suite.errors == []
    assert 15 <= len(suite.tasks) <= 25
    assert all(t.oracle is not None and t.dockerfile is not None for t in suite.tasks)
    assert all(t.config.unknown_keys == [] for t in suite.tasks)
    assert len([t for t in suite.tasks if "long" in t.tags]) == 2


def test_dockerfile_bases_leave_out_stages_and_scratch() -> None:
    text = "FROM --platform=linux/amd64 hermetic-sandbox:slim AS build\nRUN x\n"
    text += "from build\nFROM scratch\nFROM a/b:c\n"
    assert base_images(text) == ["hermetic-sandbox:slim", "a/b:c"]


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # fewer failures than draws: some draw passes
    assert pass_at_k(2, 1, 5) == 1.0  # k clipped to n


def result(
    task: str, attempt: int, reward: float, error_class: str | None = None, tags: list[str] | None = None
) -> AttemptResult:
    return AttemptResult(
        task=task, attempt=attempt, reward=reward, passed=reward >= 1, duration_s=1.0,
        tags=tags or [], error_class=error_class,  # type: ignore[arg-type]
    )  # fmt: skip


def test_the_summary_keeps_infrastructure_failures_out_of_the_agents_score() -> None:
    results = [
        result("a", 1, 1.0, tags=["x"]),
        result("a", 2, 0.0, "agent-timeout", tags=["x"]),
        result("b", 1, 0.0, "environment-error", tags=["x", "y"]),
        result("b", 2, 1.0, tags=["x", "y"]),
        result("c", 1, 0.0, "sandbox-error"),
        result("c", 2, 0.0, "verifier-error"),
    ]
    summary = summarize(results, k=2)
    overall = summary.overall
    assert (overall.tasks, overall.attempts, overall.passed, overall.infrastructure_failures) == (3, 3, 2, 3)
    assert overall.pass_at_1 == pytest.approx(
        (0.5 + 1.0) / 2
    )  # c is not scored: nothing of it was the agent's
    assert overall.pass_at_k == 1.0
    assert overall.errors == {
        "agent-timeout": 1,
        "environment-error": 1,
        "sandbox-error": 1,
        "verifier-error": 1,
    }
    assert summary.per_task["c"].attempts == 0 and summary.per_task["c"].infrastructure_failures == 2
    assert summary.per_tag["y"].pass_at_1 == 1.0 and summary.per_tag["x"].tasks == 2


def test_the_paired_bootstrap_brackets_the_difference() -> None:
    a = [result(t, 1, r) for t, r in zip("abcdefgh", [0, 0, 1, 0, 1, 0, 0, 1], strict=True)]
    b = [result(t, 1, r) for t, r in zip("abcdefgh", [1, 0, 1, 1, 1, 1, 0, 1], strict=True)] + [
        result("z", 1, 1)
    ]
    found = compare(a, b)
    assert found.delta == pytest.approx(3 / 8) and found.only_b == ["z"] and len(found.tasks) == 8
    assert 0.0 <= found.low < found.delta < found.high <= 1.0
    same = compare(a, a)
    assert (same.delta, same.low, same.high) == (0.0, 0.0, 0.0)


def test_results_after_a_torn_last_line_keep_every_whole_one(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    results = ResultsFile(path)
    results.append(result("a", 1, 1.0))
    with path.open("a") as out:
        out.write('{"task": "b", "attem')  # kill -9 in the middle of a write
    results.append(result("c", 1, 0.0))
    assert [(r.task, r.attempt) for r in results.read()] == [("a", 1), ("c", 1)]
