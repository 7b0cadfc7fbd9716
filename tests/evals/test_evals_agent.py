"""The `hermetic` agent in evaluation runs, end to end through the CLI on docker with the scripted model:
each attempt a session of the run's own database (source eval) working in the task's sandbox, and
`--learning on` against `off`: a skill the first attempt wrote makes the second one pass; `frozen` starts
every attempt from the profile's library and leaves it as it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend
from hermetic_cli import hermetic, scripted_env
from typer.testing import CliRunner

from control_plane.cli.main import app
from control_plane.models.fake_llm import FakeLLM, ScriptedToolCall, Turn
from control_plane.store import Store

SKILL = "---\nname: write-greeting\ndescription: How to write the greeting file.\n---\nCOMMAND: {command}\n"
VERIFY = "#!/usr/bin/env bash\nset -e\ntest -n greeting\n"
COMMAND = "echo hello > /app/greeting.txt"


class SkillUser(FakeLLM):
    """A model that solves the greeting task only with its skill: it looks the skill up; with it, runs
    the command the skill names; without it, writes the skill down for next time and gives up."""

    def _next(self, body: dict[str, Any]) -> tuple[int, Turn | None]:
        with self._lock:
            self.requests.append(body)
            number = len(self.requests)
        messages = body["messages"]
        last = messages[-1]
        if last["role"] == "user":
            return number, call("skill_view", name="write-greeting")
        tool = next(
            c["function"]["name"]
            for m in messages
            if m["role"] == "assistant"
            for c in m.get("tool_calls") or []
            if c["id"] == last.get("tool_call_id")
        )
        result = last.get("content") or ""
        if tool == "skill_view" and "COMMAND: " in result:
            return number, call("terminal", command=result.split("COMMAND: ", 1)[1].splitlines()[0])
        if tool == "skill_view":
            content = SKILL.format(command=COMMAND)
            return number, call(
                "skill_manage", action="create", name="write-greeting", content=content,
                files={"scripts/verify.sh": VERIFY},
            )  # fmt: skip
        if tool == "skill_manage":
            return number, Turn(text=f"no skill yet; wrote one ({'merged' in result})")
        return number, Turn(text="done")


def call(tool: str, **arguments: Any) -> Turn:
    return Turn(tool_calls=[ScriptedToolCall(name=tool, arguments=arguments)])


def greeting_suite(root: Path) -> Path:
    task = root / "greeting"
    for sub in ("tests", "solution"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    (task / "instruction.md").write_text("Write hello to /app/greeting.txt.")
    (task / "task.toml").write_text('[metadata]\ntags = ["skills"]\n[agent]\ntimeout_sec = 120\n')
    (task / "solution" / "solve.sh").write_text(f"{COMMAND}\n")
    (task / "tests" / "test.sh").write_text(
        'if [ "$(cat /app/greeting.txt)" = hello ]; then echo 1; else echo 0; fi '
        "> /logs/verifier/reward.txt\n"
    )
    return root


@pytest.fixture
def model() -> Any:
    with SkillUser() as server:
        yield server


def run(
    tmp_path: Path, model: SkillUser, learning: str, *flags: str
) -> tuple[list[dict[str, Any]], dict[str, Any], Path]:
    out = tmp_path / f"run-{learning}"
    env = scripted_env(tmp_path / "root", model.url, HERMETIC_BACKEND="docker")
    done = hermetic(
        "eval", "run", str(greeting_suite(tmp_path / "suite")), "--agent", "hermetic", "--learning", learning,
        "-k", "2", "-w", "1", "--out", str(out), *flags, env=env,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    results = sorted(
        (json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()),
        key=lambda r: r["attempt"],
    )
    return results, json.loads((out / "summary.json").read_text()), out


def test_learning_on_lets_the_second_attempt_use_the_first_ones_skill(
    tmp_path: Path, model: SkillUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_backend("docker")
    on, on_summary, out = run(tmp_path, model, "on", "--toolsets", "terminal,skills", "--max-iterations", "5")
    offered = {t["function"]["name"] for t in model.requests[0]["tools"]}
    assert {"terminal", "skill_view", "skill_manage"} <= offered and "memory" not in offered
    assert [(r["reward"], r["error_class"]) for r in on] == [(0.0, None), (1.0, None)]
    assert [r["tool_calls"] for r in on] == [2, 2]  # view + create; view + terminal
    assert all(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 for r in on)
    assert on_summary["overall"]["pass_at_1"] == 0.5 and on_summary["overall"]["pass_at_k"] == 1.0
    assert (out / "home" / "skills" / "library" / "write-greeting").is_dir()  # the run's own library
    assert not (tmp_path / "root" / "skills" / "library" / "write-greeting").exists()  # the user's: untouched
    with Store(f"sqlite:///{tmp_path / 'root' / 'hermetic.db'}") as store:  # the profile's own database
        sessions = {s.id: s for s in store.list_sessions("default", limit=100)}
        assert {sessions[r["session_id"]].source for r in on} == {"eval"}
        assert sessions[on[1]["session_id"]].title == "eval: greeting #2"
        calls = [c.tool for c in store.tool_calls(on[1]["session_id"])]
    assert calls == ["skill_view", "terminal"]

    off, off_summary, out = run(tmp_path, model, "off")
    assert [r["reward"] for r in off] == [0.0, 0.0]  # each attempt starts with an empty library
    assert off_summary["overall"]["mean_reward"] == 0.0 < on_summary["overall"]["mean_reward"]
    profile_skills = tmp_path / "root" / "skills"
    shutil.copytree(tmp_path / "run-on" / "home" / "skills", profile_skills)  # the profile learned it
    before = sorted(str(p.relative_to(profile_skills)) for p in profile_skills.rglob("*"))
    frozen, _, _ = run(tmp_path, model, "frozen")
    assert [r["reward"] for r in frozen] == [1.0, 1.0]  # each attempt starts from the profile's library
    assert sorted(str(p.relative_to(profile_skills)) for p in profile_skills.rglob("*")) == before

    for name, value in scripted_env(tmp_path / "root", model.url).items():  # the rest in this process
        monkeypatch.setenv(name, value)
    cli = CliRunner()
    compared = cli.invoke(app, ["eval", "compare", str(out), str(tmp_path / "run-on")])
    assert "B-A mean reward +0.500" in compared.stdout

    rl = cli.invoke(app, ["sessions", "export", "--source", "eval", "--min-reward", "1", "--format", "rl"])
    assert rl.exit_code == 0, rl.output
    lines = {json.loads(text)["id"]: json.loads(text) for text in rl.stdout.splitlines()}
    assert sorted(lines) == sorted([on[1]["session_id"], *(r["session_id"] for r in frozen)])  # reward 1 only
    line = lines[on[1]["session_id"]]
    assert (line["id"], line["task"], line["attempt"], line["reward"], line["label"]) == (
        on[1]["session_id"], "greeting", 2, 1.0, True,
    )  # fmt: skip
    assert line["prompt"][-1] == {"role": "user", "content": line["messages"][1]["content"]}
    assert "Write hello to /app/greeting.txt." in line["prompt"][-1]["content"]
    assert [m["role"] for m in line["completion"]][-1] == "assistant" and line["completion"][0]["tool_calls"]
    assert {t["function"]["name"] for t in line["tools"]} == {"skill_view", "terminal"}
    every = cli.invoke(app, ["sessions", "export", "--source", "eval", "--format", "sharegpt"])
    rewards = sorted(json.loads(text)["reward"] for text in every.stdout.splitlines())
    assert rewards == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0], (
        every.output
    )  # each attempt of both runs, with its reward


def test_into_profile_learns_in_the_profiles_own_library(
    tmp_path: Path, model: SkillUser, monkeypatch: pytest.MonkeyPatch
) -> None:
    get_backend("local")
    for name, value in scripted_env(tmp_path / "root", model.url).items():  # in this process: no imports
        monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    done = CliRunner().invoke(
        app,
        ["eval", "run", str(greeting_suite(tmp_path / "suite")), "--agent", "hermetic", "--learning", "on",
         "--into-profile", "--backend", "local", "--toolsets", "terminal,skills", "--max-iterations", "5",
         "-k", "2", "-w", "1", "--out", str(out)],
    )  # fmt: skip
    assert done.exit_code == 1, done.output  # attempt 1 did not pass
    results = sorted((json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()),
                     key=lambda r: r["attempt"])  # fmt: skip
    assert [(r["reward"], r["error_class"]) for r in results] == [(0.0, None), (1.0, None)]
    assert (tmp_path / "root" / "skills" / "library" / "write-greeting").is_dir()  # kept in the profile
    assert not (out / "home").exists()  # no home of the run's own: attempt 2 used the profile's library
