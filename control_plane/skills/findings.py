"""Threat findings in a skill, judged by where they sit.

SKILL.md is the skill's instructions: the model reads it whenever the skill is used. A file that runs
(scripts/, tests/, a shebang, a script's suffix) is executed. Every other file (references/, assets/, a
README) is a reference the model opens only when the instructions send it there: a guide *about* prompt
injection quotes injection phrases, a setup page shows `curl ... | sh`. So a finding in a reference
counts less: an injection or a fake turn there is LOW (quoted, not addressed to the model), other
families one step lower; a secret or hidden characters count the same anywhere.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from ..safety.threats import Family, Finding, Severity

Place = Literal["instructions", "reference", "executable"]
Status = Literal["refused", "accepted", "warning"]
"""refused: stops the merge; accepted: passed because the operator accepted it; warning: low enough for
the policy to merge it (shown and recorded)."""
ACCEPT_ALL = "all"
"""An accept value that accepts every finding that can be accepted."""
INSTRUCTIONS = "SKILL.md"
_QUOTED_FAMILIES: tuple[Family, ...] = ("injection", "role-hijack")
"""Families that, in a reference, are text about models rather than text to one."""
_SAME_ANYWHERE: tuple[Family, ...] = ("secret", "invisible-unicode")


@dataclass(frozen=True)
class SkillFinding:
    id: str
    """Short and stable (file, line, rule): what `--accept` names, like FILE:LINE."""
    file: str
    line: int
    family: Family
    rule: str
    severity: Severity
    """Judged for its place (the rule's own severity for instructions and executables)."""
    place: Place
    excerpt: str
    status: Status = "refused"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def acceptable(self) -> bool:
        """A finding in a file that runs is never accepted: fix the script instead."""
        return self.place != "executable" and self.line > 0

    def named_by(self, accept: frozenset[str]) -> bool:
        return bool({self.where, self.id, ACCEPT_ALL} & accept)

    def __str__(self) -> str:
        return (
            f"{self.file}: {self.family}/{self.rule}: {self.excerpt!r} "
            f"({self.severity}, at {self.where}, id {self.id})"
        )


def place_of(rel: str, executables: frozenset[str]) -> Place:
    if rel in executables:
        return "executable"
    return "instructions" if rel == INSTRUCTIONS else "reference"


def judge(rel: str, finding: Finding, place: Place) -> SkillFinding:
    """The finding with its id and its severity for the place it was found in."""
    severity = finding.severity
    if place == "reference" and finding.family in _QUOTED_FAMILIES:
        severity = Severity.LOW
    elif place == "reference" and finding.family not in _SAME_ANYWHERE:
        severity = severity.lowered()
    digest = hashlib.sha1(f"{rel}:{finding.line}:{finding.family}/{finding.rule}".encode()).hexdigest()
    return SkillFinding(
        f"t-{digest[:8]}", rel, finding.line, finding.family, finding.rule, severity, place, finding.excerpt
    )
