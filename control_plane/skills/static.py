"""The gate's static checks on a candidate skill: format, files, threats. They run on the host and
start no sandbox; a candidate that fails one is never executed.

Each check returns a `Check` and the reasons it failed (one readable line per fault, for the model).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..safety.threats import FAMILIES, SCRIPT_FAMILIES, scan
from .format import Skill, SkillFormatError, parse_skill
from .model import Check


@dataclass(frozen=True)
class FileLimits:
    max_files: int = 100
    max_file_bytes: int = 256 * 1024
    max_total_bytes: int = 2 * 1024 * 1024


LIMITS = FileLimits()
THREAT_FAMILIES = FAMILIES + SCRIPT_FAMILIES
"""A skill's text is both read by the model (prose families) and run (script families)."""


def check_format(candidate: Path) -> tuple[Check, list[str], Skill | None]:
    """SKILL.md per the Agent Skills spec, its name equal to the directory's."""
    try:
        skill = parse_skill(candidate)
    except SkillFormatError as exc:
        reasons = [f"format: {problem}" for problem in exc.problems]
        return Check("format", False, "\n".join(exc.problems)), reasons, None
    return Check("format", True, f"{skill.name}: SKILL.md is valid"), [], skill


def text_files(candidate: Path) -> tuple[dict[str, str], list[str]]:
    """Every file of the skill as text, by relative path, and the problems that stop a file from being
    one: a symlink leaving the skill, a binary, a special file, a size or count over the limits."""
    root = candidate.resolve()
    texts: dict[str, str] = {}
    problems: list[str] = []
    count = total = 0
    for directory, dirs, files in os.walk(candidate):  # does not follow symlinked directories
        for entry in sorted(dirs + files):
            path = Path(directory, entry)
            rel = path.relative_to(candidate).as_posix()
            if path.is_symlink():
                target = (path.parent / os.readlink(path)).resolve()
                if not target.is_relative_to(root):
                    problems.append(f"{rel} is a symlink leaving the skill (to {os.readlink(path)})")
                continue  # a link inside the skill: its target is checked as itself
            if entry in dirs:
                continue
            if not path.is_file():
                problems.append(f"{rel} is not a regular file")
                continue
            size = path.stat().st_size
            count += 1
            total += size
            if size > LIMITS.max_file_bytes:
                problems.append(f"{rel} is {size:,} bytes; a file may have at most {LIMITS.max_file_bytes:,}")
                continue
            data = path.read_bytes()
            try:
                if b"\0" in data:
                    raise UnicodeDecodeError("utf-8", data, 0, 1, "NUL byte")
                texts[rel] = data.decode("utf-8")
            except UnicodeDecodeError:
                problems.append(f"{rel} is binary; a skill holds text files only (scripts, references)")
    if count > LIMITS.max_files:
        problems.append(f"the skill has {count} files; at most {LIMITS.max_files}")
    if total > LIMITS.max_total_bytes:
        problems.append(f"the skill's files total {total:,} bytes; at most {LIMITS.max_total_bytes:,}")
    return texts, problems


def check_files(candidate: Path) -> tuple[Check, list[str], dict[str, str]]:
    texts, problems = text_files(candidate)
    if problems:
        return Check("files", False, "\n".join(problems)), [f"files: {p}" for p in problems], texts
    return Check("files", True, f"{len(texts)} text files"), [], texts


def check_threats(texts: dict[str, str]) -> tuple[Check, list[str]]:
    """The threat scan of every text file, prose and script families alike."""
    found = [f"{rel}: {finding}" for rel, text in texts.items() for finding in scan(text, THREAT_FAMILIES)]
    if found:
        return Check("threats", False, "\n".join(found)), [f"threats: {line}" for line in found]
    return Check("threats", True, f"{len(texts)} files scanned"), []


def static_checks(candidate: Path) -> tuple[list[Check], list[str], Skill | None]:
    """Every static check (all run: the model sees every fault at once); the skill if its format is valid."""
    format_check, reasons, skill = check_format(candidate)
    files_check, file_reasons, texts = check_files(candidate)
    threats_check, threat_reasons = check_threats(texts)
    return [format_check, files_check, threats_check], reasons + file_reasons + threat_reasons, skill
