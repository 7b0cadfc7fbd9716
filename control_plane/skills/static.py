"""The gate's static checks on a candidate skill: format, files, threats. They run on the host and
start no sandbox; a candidate that fails one is never executed.

Each check returns a `Check` and the reasons it failed (one readable line per fault, for the model).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from ..safety.threats import FAMILIES, SCRIPT_FAMILIES, Severity, scan
from .findings import Place, SkillFinding, Status, judge, place_of
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
THREAT_REASON = "threats: "
"""How a verdict's reason for a refused threat finding begins (the finding itself is in verdict.findings)."""
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
    texts: dict[str, str],
    accept: frozenset[str] = frozenset(),
    executables: frozenset[str] = frozenset(),
    tolerate: Severity | None = None,
) -> tuple[Check, list[str], list[SkillFinding]]:
    """The threat scan of every text file, prose and script families alike, each finding judged for its
    file's place (findings.py). A finding passes as a warning when its severity is at most `tolerate`,
    or when the operator accepted it (`FILE:LINE`, its id or "all" in `accept`) and it is not in an
    executable file. The lines whose findings all passed are blanked and the file scanned again, so a
    second match of the same rule still shows. Returns the check, the reasons and every finding."""
    findings = [
        finding
        for rel, text in texts.items()
        for finding in _file_findings(rel, text, place_of(rel, executables), accept, tolerate)
    ]
    refused = [f for f in findings if f.status == "refused"]
    reasons = [
        f"{THREAT_REASON}{f}"
        + ("; a finding in an executable file cannot be accepted" if f.named_by(accept) else "")
        for f in refused
    ]
    summary = "".join(
        f"\n{'accepted by the operator' if f.status == 'accepted' else 'warning'}: {f}"
        for f in findings
        if f.status != "refused"
    )
    if reasons:
        return (
            Check("threats", False, "\n".join(r.removeprefix(THREAT_REASON) for r in reasons) + summary),
            reasons,
            findings,
        )
    return Check("threats", True, f"{len(texts)} files scanned{summary}"), [], findings


def _file_findings(
    rel: str, text: str, place: Place, accept: frozenset[str], tolerate: Severity | None
) -> list[SkillFinding]:
    lines = text.split("\n")
    passed: list[SkillFinding] = []
    while True:
        found = [judge(rel, f, place) for f in scan("\n".join(lines), THREAT_FAMILIES)]
        found = [dataclasses.replace(f, status=_status(f, accept, tolerate)) for f in found]
        blocked = {f.line for f in found if f.status == "refused"}
        taken = {f.line for f in found if f.line and f.line not in blocked}
        if not taken:
            return passed + found
        passed += [f for f in found if f.line in taken]
        for number in taken:
            lines[number - 1] = ""


def _status(finding: SkillFinding, accept: frozenset[str], tolerate: Severity | None) -> Status:
    if tolerate is not None and finding.severity.rank <= tolerate.rank:
        return "warning"
    return "accepted" if finding.acceptable and finding.named_by(accept) else "refused"


@dataclass
class StaticResult:
    checks: list[Check]
    reasons: list[str]
    skill: Skill | None
    """The skill, when its format is valid."""
    executables: set[str]
    findings: list[SkillFinding]
    """Every threat finding, refused or passed (accepted by the operator, or a warning)."""

    @property
    def accepted(self) -> list[str]:
        """Threat findings passed because the operator accepted them, one line each."""
        return [str(f) for f in self.findings if f.status == "accepted"]


def static_checks(
    candidate: Path, accept: frozenset[str] = frozenset(), tolerate: Severity | None = None
) -> StaticResult:
    """Every static check (all run: the model sees every fault at once)."""
    format_check, reasons, skill = check_format(candidate)
    files_check, file_reasons, texts = check_files(candidate)
    executables = executable_files(candidate, texts)
    threats_check, threat_reasons, findings = check_threats(texts, accept, frozenset(executables), tolerate)
    checks = [format_check, files_check, threats_check]
    return StaticResult(checks, reasons + file_reasons + threat_reasons, skill, executables, findings)
