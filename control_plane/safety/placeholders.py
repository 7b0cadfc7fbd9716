"""Whether a match of a secret's shape is a placeholder written in documentation rather than a secret.

Guides show keys as `sk-...xxxx`, `AIzaXXXXXXXXXXXX...`, `<your-key>`, `ghp_your_token_here` or
AWS's `AKIAIOSFODNN7EXAMPLE`; none of them opens anything. A real key is random: no long run of one
character, no words, high entropy, and shown whole (not cut by an ellipsis, not inside `<...>`).
"""

from __future__ import annotations

import math
import re
from collections import Counter

_PREFIX = re.compile(r"^(?:sk-(?:ant-|proj-)?|gh[pousr]_|github_pat_|AKIA|ASIA|xox[abposr]-|AIza)")
_RUN = re.compile(r"(.)\1{3,}")
"""Four of one character in a row: `XXXX`, `0000`, `****` (a random key of 40 characters has one by chance
about once in 7,000 keys)."""
_WORDS = re.compile(
    r"your|example|placeholder|dummy|sample|redacted|changeme|replace|insert|here|fake|secret|token|apikey"
    r"|api_key",
    re.I,
)
_ELLIPSIS = ("...", "…")
_MIN_ENTROPY = 3.0
"""Bits per character below which a key's body is too regular to be random (random base62: about 5)."""


def is_placeholder(kind: str, text: str, start: int, end: int) -> bool:
    """Whether `text[start:end]`, a match of the secret shape `kind`, is a placeholder."""
    secret = text[start:end]
    before, after = text[max(0, start - 3) : start], text[end : end + 3]
    if after.startswith(_ELLIPSIS) or before.endswith(_ELLIPSIS) or before.endswith(("<", "{")):
        return True  # cut for display, or a template's slot
    if after.startswith((">", "}")):
        return True
    if kind == "private-key":  # base64 of a key has runs (AAAA) of its own: only an elided body is fake
        body = "".join(line for line in secret.splitlines() if not line.startswith("-----"))
        return not body.strip() or any(mark in body for mark in (*_ELLIPSIS, "<", "XXXX", "xxxx"))
    body = _PREFIX.sub("", secret)
    if _WORDS.search(body) or (kind != "jwt" and _RUN.search(body)):
        return True
    return len(body) >= 16 and _entropy(body) < _MIN_ENTROPY


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())
