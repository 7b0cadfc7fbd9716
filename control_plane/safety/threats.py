"""A threat scan for text that will sit in a prompt: memory entries, skill files.

`scan(text)` returns what it found, by family; a caller picks the families that matter for its text.
The rules aim at instructions planted for a model, not at ordinary notes: "the repo uses ~/.bashrc
conventions" passes, "echo '...' >> ~/.bashrc" does not.

SCRIPT_FAMILIES (reverse shells, downloads piped into a shell, destructive commands) are for text that
will be executed, like a skill's scripts: a memory note saying "install with curl ... | sh" is ordinary
prose, so they are opt-in and not part of the default scan.

Each finding carries its rule's severity (threat_rules.py: most are HIGH, a few MEDIUM, and some rules
judge their match: a download piped into `python3 -c '...'` is no finding, a key in an auth header is
LOW). A shape of a secret that is a placeholder (placeholders.py) is no finding.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from .placeholders import is_placeholder
from .redaction import SECRET_SHAPES, Redactor
from .threat_rules import FAMILIES, JUDGE, RULES, SCRIPT_FAMILIES, SEVERITY, Family, Severity

__all__ = ["FAMILIES", "SCRIPT_FAMILIES", "Family", "Finding", "Severity", "scan"]


@dataclass(frozen=True)
class Finding:
    family: Family
    rule: str
    excerpt: str
    """The matched text with a little context; secrets are cut short, invisible characters spelled out."""
    line: int = 0
    """The line (from 1) of the match in the scanned text; 0 when not known."""
    severity: Severity = Severity.HIGH
    """The rule's severity where text is an instruction (a caller may judge its place: skills/findings.py)."""

    def __str__(self) -> str:
        return f"{self.family}/{self.rule}: {self.excerpt!r}"


# Characters that render as nothing or reorder what is shown: text the user cannot see, the model reads.
_ZERO_WIDTH = "\u200b\u200c\u200d\u2060\u2061\u2062\u2063\u2064\ufeff\u180e\u00ad"
_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
_INVISIBLE = re.compile(f"[{_ZERO_WIDTH}]|[{_BIDI}]|[\U000e0000-\U000e007f]")
_EXCERPT = 30
"""Characters of context on each side of a match."""
_SECRET_NEEDLES: dict[str, tuple[str, ...]] = {
    "private-key": ("private key",),
    "openai-or-anthropic-key": ("sk-",),
    "github-token": ("gh", "github_pat_"),
    "aws-access-key": ("akia", "asia"),
    "slack-token": ("xox",),
    "google-api-key": ("aiza",),
    "jwt": ("eyj",),
    "bearer-token": ("bearer",),
}
"""Needles of redaction's SECRET_SHAPES; a shape without an entry here is always tried."""
_redact = Redactor()  # an excerpt of a rule's match must not repeat a secret next to it


def scan(text: str, families: Iterable[Family] | None = None) -> list[Finding]:
    """What in `text` looks like a planted instruction, a secret or hidden characters.

    One finding per rule that matched (its first match). `families` limits the scan; default: FAMILIES
    (SCRIPT_FAMILIES only when asked for). Raises ValueError naming an unknown family.
    """
    chosen = set(FAMILIES if families is None else families)
    unknown = chosen - set(FAMILIES + SCRIPT_FAMILIES)
    if unknown:
        known = ", ".join(FAMILIES + SCRIPT_FAMILIES)
        raise ValueError(f"unknown threat famil(ies) {sorted(unknown)}; known: {known}")
    found: list[Finding] = []
    if "invisible-unicode" in chosen:
        found += _invisible(text)
    normal = unicodedata.normalize("NFKC", _INVISIBLE.sub("", text))
    folded = " ".join(normal.lower().split())
    for family, rule, needles, pattern in RULES:
        if family not in chosen or not any(needle in folded for needle in needles):
            continue
        fixed = SEVERITY.get(rule, Severity.HIGH)
        judge = JUDGE.get(rule)
        judged = (
            (m, severity)
            for m in pattern.finditer(normal)
            if (severity := fixed if judge is None else judge(m)) is not None
        )
        if found_match := next(judged, None):
            match, severity = found_match
            excerpt = _redact(_excerpt(normal, match.start(), match.end()))
            line = normal.count("\n", 0, match.start()) + 1
            found.append(Finding(family, rule, excerpt, line, severity))
    if "secret" in chosen:
        for kind, pattern in SECRET_SHAPES.items():
            hints = _SECRET_NEEDLES.get(kind)
            if hints is not None and not any(hint in folded for hint in hints):
                continue
            real = (
                m for m in pattern.finditer(normal) if not is_placeholder(kind, normal, m.start(), m.end())
            )
            if secret_match := next(real, None):
                secret = secret_match.group()
                shown = secret[:6] + f"... ({len(secret)} characters)"
                line = normal.count("\n", 0, secret_match.start()) + 1
                found.append(Finding("secret", kind, shown, line))
    return found


def _invisible(text: str) -> list[Finding]:
    found: dict[str, Finding] = {}
    for match in _INVISIBLE.finditer(text):
        char = match.group()
        if char == "\u200d" and _joins_emoji(text, match.start()):
            continue  # the joiner inside an emoji sequence (a family, a flag) is what it is for
        rule = "tag-characters" if ord(char) >= 0xE0000 else "bidi-control" if char in _BIDI else "zero-width"
        if rule not in found:
            start = max(0, match.start() - _EXCERPT)
            shown = "".join(
                f"<U+{ord(c):04X}>" if _INVISIBLE.match(c) else c
                for c in text[start : match.end() + _EXCERPT]
            )
            line = text.count("\n", 0, match.start()) + 1
            found[rule] = Finding(
                "invisible-unicode", rule, _redact(shown), line, SEVERITY.get(rule, Severity.HIGH)
            )
    return list(found.values())


def _joins_emoji(text: str, at: int) -> bool:
    def emoji(c: str) -> bool:
        return unicodedata.category(c) in ("So", "Sk") or c == "\ufe0f"

    return 0 < at < len(text) - 1 and emoji(text[at - 1]) and emoji(text[at + 1])


def _excerpt(text: str, start: int, end: int) -> str:
    left = max(0, start - _EXCERPT)
    right = min(len(text), end + _EXCERPT)
    return (
        ("..." if left else "") + text[left:right].replace("\n", " ") + ("..." if right < len(text) else "")
    )
