"""SKILL.md in the Agent Skills format (agentskills.io): YAML frontmatter, then a Markdown body.

Shared by the library (listing, viewing) and the gate (the "format" check). Hermetic's own fields live
under `metadata` with keys prefixed `hermetic.` so every skill stays valid for `agentskills validate`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import yaml

SKILL_FILE = "SKILL.md"
NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
FIELDS = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
HERMETIC_PREFIX = "hermetic."


class SkillFormatError(ValueError):
    """A skill directory that is not a valid Agent Skill; `problems` has one readable line per fault."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class Skill:
    name: str
    description: str
    body: str
    path: Path
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    allowed_tools: str | None = None


def split_frontmatter(text: str) -> tuple[str, str]:
    """(frontmatter YAML, body). Raises SkillFormatError when the file does not start with '---'."""
    if not text.startswith("---"):
        raise SkillFormatError([f"{SKILL_FILE} must start with YAML frontmatter between '---' lines"])
    parts = text.split("\n")
    for index, line in enumerate(parts[1:], start=1):
        if line.rstrip() == "---":
            return "\n".join(parts[1:index]), "\n".join(parts[index + 1 :]).strip()
    raise SkillFormatError([f"{SKILL_FILE}: the frontmatter is not closed with a '---' line"])


def parse_skill(directory: Path) -> Skill:
    """Read and validate `directory/SKILL.md`. Raises SkillFormatError listing every problem found."""
    file = directory / SKILL_FILE
    if not file.is_file():
        raise SkillFormatError([f"{directory.name}: no {SKILL_FILE} file"])
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SkillFormatError([f"{SKILL_FILE} is not UTF-8 text"]) from None
    frontmatter, body = split_frontmatter(text)
    try:
        data = yaml.safe_load(frontmatter)
    except yaml.YAMLError as exc:
        raise SkillFormatError([f"{SKILL_FILE}: the frontmatter is not valid YAML ({exc})"]) from None
    if not isinstance(data, dict):
        raise SkillFormatError([f"{SKILL_FILE}: the frontmatter must be a YAML mapping"])
    problems = _problems(data, directory.name)
    if problems:
        raise SkillFormatError(problems)
    return Skill(
        name=data["name"],
        description=data["description"].strip(),
        body=body,
        path=directory,
        license=data.get("license"),
        compatibility=data.get("compatibility"),
        metadata=dict(data.get("metadata") or {}),
        allowed_tools=data.get("allowed-tools"),
    )


def _problems(data: dict[object, object], directory_name: str) -> list[str]:
    problems = []
    unknown = sorted(str(key) for key in data if key not in FIELDS)
    if unknown:
        problems.append(
            f"unknown frontmatter field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(FIELDS))} "
            "(put your own fields under metadata)"
        )
    name = data.get("name")
    if not isinstance(name, str) or not name:
        problems.append("name is required: 1-64 characters of a-z, 0-9 and single hyphens")
    else:
        name = unicodedata.normalize("NFKC", name)
        if len(name) > MAX_NAME or not NAME.match(name):
            problems.append(
                f"name {name!r} must be 1-64 characters of a-z, 0-9 and single hyphens, "
                "not starting or ending with a hyphen"
            )
        if name != unicodedata.normalize("NFKC", directory_name):
            problems.append(f"name {name!r} must equal the directory name {directory_name!r}")
    description = data.get("description")
    if not isinstance(description, str) or not description.strip():
        problems.append("description is required: what the skill does and when to use it (1-1024 characters)")
    elif len(description) > MAX_DESCRIPTION:
        problems.append(f"description is {len(description)} characters; at most {MAX_DESCRIPTION}")
    for key in ("license", "allowed-tools"):
        if key in data and not isinstance(data[key], str):
            problems.append(f"{key} must be a string")
    compatibility = data.get("compatibility")
    if compatibility is not None and (
        not isinstance(compatibility, str) or len(compatibility) > MAX_COMPATIBILITY
    ):
        problems.append(f"compatibility must be a string of at most {MAX_COMPATIBILITY} characters")
    metadata = data.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        problems.append('metadata must map strings to strings (quote values: hermetic.version: "2")')
    return problems
