"""Shared pieces of the skill tests: SKILL.md text, checks that pass or fail, a skill added through the
tools."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from agent_runs import call
from conftest import get_backend

from backends import Backend
from control_plane.config.settings import SkillsSettings
from control_plane.skills.library import SkillLibrary


def docker() -> Backend:
    """The gate's sandboxes: real Docker (skips, with the reason, where dockerd is absent)."""
    return get_backend("docker")


def skill_md(name: str, description: str, body: str = "Run scripts/verify.sh.") -> str:
    return f'---\nname: {name}\ndescription: {description}\nmetadata:\n  hermetic.version: "1"\n---\n{body}\n'


PASSING = '#!/usr/bin/env bash\nset -e\ntest "$(echo $((6 * 7)))" = 42\necho answer-ok\n'

FAILING = "#!/usr/bin/env bash\necho 'expected 42, got 41' >&2\nexit 1\n"


def library_at(root: Path, **settings: Any) -> SkillLibrary:
    return SkillLibrary(root / "skills", SkillsSettings(**settings), backend=docker)


def add(library: SkillLibrary, name: str, description: str, body: str = "steps", check: str = PASSING) -> int:
    library.write(name, "SKILL.md", skill_md(name, description, body), new=True)
    library.write(name, "scripts/verify.sh", check)
    version = library.submit(name, proposer="test").version
    assert version is not None
    return version


BODY = "Steps: compute six times seven with shell arithmetic and compare it with the expected answer."


def make_skill(
    root: Path,
    files: dict[str, str | bytes],
    directory: str = "demo-skill",
    metadata: dict[str, str] | None = None,
    **frontmatter: object,
) -> Path:
    """A skill directory under `root`: SKILL.md from the arguments, plus `files` by relative path."""
    skill = root / directory
    skill.mkdir()
    fields: dict[str, object] = {
        "name": directory,
        "description": "Counts the lines of a file. Use for line counts.",
    }
    fields.update(frontmatter)
    if metadata is not None:
        fields["metadata"] = metadata
    (skill / "SKILL.md").write_text(f"---\n{yaml.safe_dump(fields)}---\n# Count lines\nRun `wc -l FILE`.\n")
    for rel, content in files.items():
        path = skill / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return skill


def merge_turns(script: str) -> list[dict[str, Any]]:
    """The reviewer merges the pair into answer-check with `script` as its check."""
    merged = skill_md("answer-check", "Check that the answer is 42, and report it.", BODY + " Report it.")
    merge = call(
        "skill_manage", action="merge", name="answer-check", sources=["answer-check", "check-answer"],
        content=merged, files={"scripts/verify.sh": script}, reason="the same check twice",
    )  # fmt: skip
    return [{"tool_calls": [merge]}, {"text": "done reviewing"}]
