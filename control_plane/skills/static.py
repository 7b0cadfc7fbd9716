"""The gate's static checks on a candidate skill: format, files, threats. They run on the host and
start no sandbox; a candidate that fails one is never executed.

Each check returns a `Check` and the reasons it failed (one readable line per fault, for the model).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from ..safety.threats import FAMILIES, SCRIPT_FAMILIES, Finding, scan
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
SCRIPT_SUFFIXES = (".sh", ".bash", ".py", ".js", ".mjs", ".ts", ".rb", ".pl", ".ps1", ".php", ".lua")


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


def finding_id(rel: str, finding: Finding) -> str:
    """A short stable id for one finding, an alternative to FILE:LINE when accepting it."""
    digest = hashlib.sha1(f"{rel}:{finding.line}:{finding.family}/{finding.rule}".encode()).hexdigest()
    return f"t-{digest[:8]}"


def executable_files(candidate: Path, texts: dict[str, str]) -> set[str]:
    """The files of a skill that are meant to run: under scripts/ or tests/, executable, a shebang, or
    a script's suffix. A skill with none is instruction-only."""
    return {
        rel
        for rel, text in texts.items()
        if rel.split("/")[0] in ("scripts", "tests")
        or text.startswith("#!")
        or rel.endswith(SCRIPT_SUFFIXES)
        or (candidate / rel).stat().st_mode & 0o111
    }


def check_threats(
    texts: dict[str, str], accept: frozenset[str] = frozenset(), executables: frozenset[str] = frozenset()
) -> tuple[Check, list[str], list[str]]:
    """The threat scan of every text file, prose and script families alike. A finding the operator
    accepted (`FILE:LINE` or its id, in `accept`) passes, unless its file is executable; the lines
    accepted are blanked and the file scanned again, so a second match of the same rule still shows.
    Returns the check, the reasons and the accepted findings (one line each)."""
    found: list[str] = []
    accepted: list[str] = []
    for rel, text in texts.items():
        lines = text.split("\n")
        while True:
            refused: list[str] = []
            passed: dict[int, list[str]] = {}
            blocked: set[int] = set()
            for finding in scan("\n".join(lines), THREAT_FAMILIES):
                where, fid = f"{rel}:{finding.line}", finding_id(rel, finding)
                line = f"{rel}: {finding} (at {where}, id {fid})"
                asked = where in accept or fid in accept
                if asked and rel not in executables and finding.line:
                    passed.setdefault(finding.line, []).append(line)
                    continue
                refused.append(
                    line + ("; a finding in an executable file cannot be accepted" if asked else "")
                )
                blocked.add(finding.line)
            # lines whose every finding was accepted are blanked and the file scanned again
            taken = [number for number in passed if number not in blocked]
            accepted += [line for number in taken for line in passed[number]]
            if not taken:
                found += refused
                break
            for number in taken:
                lines[number - 1] = ""
    summary = "".join(f"\naccepted by the operator: {line}" for line in accepted)
    if found:
        return Check("threats", False, "\n".join(found) + summary), [f"threats: {f}" for f in found], accepted
    return Check("threats", True, f"{len(texts)} files scanned{summary}"), [], accepted


@dataclass
class StaticResult:
    checks: list[Check]
    reasons: list[str]
    skill: Skill | None
    """The skill, when its format is valid."""
    executables: set[str]
    accepted: list[str]
    """Threat findings passed because the operator accepted them."""


def static_checks(candidate: Path, accept: frozenset[str] = frozenset()) -> StaticResult:
    """Every static check (all run: the model sees every fault at once)."""
    format_check, reasons, skill = check_format(candidate)
    files_check, file_reasons, texts = check_files(candidate)
    executables = executable_files(candidate, texts)
    threats_check, threat_reasons, accepted = check_threats(texts, accept, frozenset(executables))
    checks = [format_check, files_check, threats_check]
    return StaticResult(checks, reasons + file_reasons + threat_reasons, skill, executables, accepted)
