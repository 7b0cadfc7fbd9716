"""Lenient reading, strict writing: a SKILL.md from outside, read the way real skills are written.

Skills in the wild bend the Agent Skills spec (a YAML list where a string belongs, a description over
1,024 characters, a name that differs from the directory, extra top-level keys, `allowed-tools` as a
list). `read_lenient` accepts each of these with one warning per deviation and returns the skill
normalised; `render` writes it back so it passes `agentskills validate`. Only a SKILL.md that cannot
be parsed at all (no frontmatter, broken YAML, no name or description) is refused, with the line.
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import Any

import yaml

from .format import FIELDS, MAX_COMPATIBILITY, MAX_DESCRIPTION, MAX_NAME, NAME, SKILL_FILE, Skill


class SkillParseError(ValueError):
    """A SKILL.md that cannot be read even leniently; the message names the line and the reason."""


def read_lenient(directory: Path) -> tuple[Skill, list[str]]:
    """The skill in `directory`, normalised, and one readable warning per deviation from the spec.
    Raises SkillParseError when SKILL.md is missing, not text, or its frontmatter cannot be parsed."""
    file = directory / SKILL_FILE
    if not file.is_file():
        raise SkillParseError(f"{directory.name}: no {SKILL_FILE} file")
    try:
        text = file.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SkillParseError(f"{SKILL_FILE}: not UTF-8 text (byte {exc.start})") from None
    text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if not lines[0].rstrip() == "---":
        raise SkillParseError(
            f"{SKILL_FILE}:1: the file must start with a '---' line opening the frontmatter"
        )
    end = next((i for i, line in enumerate(lines[1:], start=1) if line.rstrip() == "---"), None)
    if end is None:
        raise SkillParseError(f"{SKILL_FILE}:1: the frontmatter opened here is never closed with '---'")
    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 2  # the frontmatter starts on the file's line 2
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SkillParseError(f"{SKILL_FILE}:{line}: the frontmatter is not valid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise SkillParseError(f"{SKILL_FILE}:2: the frontmatter must be a YAML mapping (key: value lines)")
    body = "\n".join(lines[end + 1 :]).strip()
    warnings: list[str] = []
    name = _name(data.get("name"), directory.name, warnings)
    description = _text(data.get("description"), "description", warnings)
    if not description:
        raise SkillParseError(
            f"{SKILL_FILE}:2: description is required: what the skill does and when to use it"
        )
    if len(description) > MAX_DESCRIPTION:
        warnings.append(
            f"description is {len(description)} characters; cut to {MAX_DESCRIPTION} (the full text "
            "is kept at the top of the body)"
        )
        body = f"{description}\n\n{body}".strip()
        description = _cut(description, MAX_DESCRIPTION)
    metadata = _metadata(data.get("metadata"), warnings)
    for key in sorted(str(k) for k in data if k not in FIELDS):
        warnings.append(f"unknown frontmatter field {key!r}; moved under metadata")
        metadata.setdefault(key, _as_string(data[key]))
    compatibility = _text(data.get("compatibility"), "compatibility", warnings)
    if compatibility and len(compatibility) > MAX_COMPATIBILITY:
        warnings.append(f"compatibility is {len(compatibility)} characters; cut to {MAX_COMPATIBILITY}")
        compatibility = _cut(compatibility, MAX_COMPATIBILITY)
    allowed = data.get("allowed-tools")
    if isinstance(allowed, list):
        warnings.append("allowed-tools is a list; joined into the space-separated string the spec asks for")
        allowed = " ".join(_as_string(item) for item in allowed)
    else:
        allowed = _text(allowed, "allowed-tools", warnings)
    skill = Skill(
        name=name,
        description=description,
        body=body,
        path=directory,
        license=_text(data.get("license"), "license", warnings),
        compatibility=compatibility,
        metadata=metadata,
        allowed_tools=allowed or None,
    )
    return skill, warnings


def render(skill: Skill) -> str:
    """SKILL.md as Hermetic writes it: only the spec's fields, in the spec's types."""
    fields: dict[str, Any] = {"name": skill.name, "description": skill.description}
    for key, value in (
        ("license", skill.license),
        ("compatibility", skill.compatibility),
        ("allowed-tools", skill.allowed_tools),
    ):
        if value:
            fields[key] = value
    if skill.metadata:
        fields["metadata"] = dict(skill.metadata)
    frontmatter = yaml.safe_dump(fields, sort_keys=False, allow_unicode=True, width=100)
    return f"---\n{frontmatter}---\n{skill.body}\n"


def _name(value: object, directory: str, warnings: list[str]) -> str:
    """The skill's name, made valid: lower case, hyphens for other separators; the directory's when absent."""
    if not isinstance(value, str) or not value.strip():
        warnings.append(f"name is missing or not a string; the directory name {directory!r} is used")
        value = directory
    raw = unicodedata.normalize("NFKC", value).strip()
    name = re.sub(r"[^a-z0-9]+", "-", raw.lower()).strip("-")[:MAX_NAME].strip("-")
    if not name or not NAME.match(name):
        raise SkillParseError(
            f"{SKILL_FILE}:2: name {value!r} cannot be made a skill name (a-z, 0-9, hyphens)"
        )
    if name != raw:
        warnings.append(f"name {raw!r} is not a valid skill name; normalised to {name!r}")
    if name != directory:
        warnings.append(f"name {name!r} differs from the directory {directory!r}; installed as {name!r}")
    return name


def _text(value: object, key: str, warnings: list[str]) -> str | None:
    """A string field; a list (or another scalar) is accepted and joined, with a warning."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list):
        warnings.append(f"{key} is a YAML list; its items are joined into one string")
        return " ".join(_as_string(item) for item in value).strip()
    warnings.append(f"{key} is a {type(value).__name__}; read as a string")
    return _as_string(value).strip()


def _metadata(value: object, warnings: list[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        warnings.append("metadata is not a mapping; kept as metadata 'value'")
        return {"value": _as_string(value)}
    out = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            warnings.append(f"metadata {key!r} is not a string; stored as one")
        out[str(key)] = _as_string(item)
    return out


def _as_string(value: object) -> str:
    """A YAML value as a string: scalars as written (a date, 1.0), lists and maps as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, list | dict):
        return json.dumps(value, default=str, ensure_ascii=False)
    return str(value)


def _cut(text: str, limit: int) -> str:
    """`text` within `limit` characters, at a word boundary, with an ellipsis."""
    head = text[: limit - 1]
    space = head.rfind(" ")
    return (head[:space] if space > limit // 2 else head).rstrip() + "…"
