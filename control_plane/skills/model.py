# control_plane/skills/model.py
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from ..safety.threats import Severity
from .findings import SkillFinding


@dataclass
class Check:
    name: str  # "format", "files", "threats", "verify.sh", "tests"
    ok: bool
    output: str = ""  # what the agent sees (clipped by the gate)


@dataclass
class Verdict:
    skill: str
    status: Literal["pass", "fail", "unverified"]  # unverified: no checks and the policy allowed merging
    reasons: list[str] = field(default_factory=list)  # one line per failed rule, readable by the model
    checks: list[Check] = field(default_factory=list)
    duration_ms: float = 0.0
    image: str | None = None  # the pinned image (with its id) the checks ran in
    network: str = "none"
    accepted: list[str] = field(default_factory=list)  # threat findings the operator accepted
    findings: list[SkillFinding] = field(default_factory=list)  # every threat finding, with its status


@dataclass
class GatePolicy:
    allow_unverified: bool = False  # a skill with no checks may merge (marked unverified everywhere)
    allow_network: bool = False  # may a skill's metadata request an allowlist at all
    allowed_hosts: list[str] = field(default_factory=list)  # hosts the operator accepts in such a request
    timeout: float = 120.0  # seconds for the skill's checks
    image: str = "hermetic-sandbox:slim"  # pinned: the gate resolves it to an image id and records it
    unverified_instructions: bool = False  # a skill with no executable file may merge unverified (installs)
    accept: frozenset[str] = frozenset()  # threat findings (FILE:LINE, id or "all") the operator accepted
    tolerate: Severity | None = None  # findings up to this severity merge as warnings (None: all refuse)

    def for_operator(self, accept: Iterable[str], allow_unverified: bool) -> GatePolicy:
        """What an operator's install allows beyond this policy: the findings they accepted, low findings
        as warnings (they see them; an agent's own proposal is refused on any), a skill of instructions
        only without checks, and any skill without checks when they allowed unverified."""
        return dataclasses.replace(
            self,
            unverified_instructions=True,
            allow_unverified=allow_unverified or self.allow_unverified,
            accept=frozenset(accept),
            tolerate=Severity.LOW,
        )


class SkillError(ValueError):
    """A request the library refuses (bad path, name taken, ...); the message says why."""


class UnknownSkill(SkillError):
    """No skill (or no such version or file of it) by that name."""
