"""Secrets are cut out of everything the model sees: known values exactly, and common key shapes."""

from __future__ import annotations

import re
from collections.abc import Iterable

# Shapes of credentials that leak through command output, config files and environment dumps.
SECRET_SHAPES: dict[str, re.Pattern[str]] = {
    "private-key": re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S
    ),
    "openai-or-anthropic-key": re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}"),
    "github-token": re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
    "aws-access-key": re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    "slack-token": re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    "google-api-key": re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"),
    "jwt": re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    "bearer-token": re.compile(r"(?i)(?<=\bbearer )[A-Za-z0-9._~+/\-]{20,}=*"),
}
_SECRET_WORDS = r"API_?KEY|SECRET|TOKEN|PASSWORD|PASSWD|PRIVATE_KEY|ACCESS_KEY|CREDENTIAL"
SECRET_NAME = re.compile(_SECRET_WORDS, re.I)
"""An environment variable or config key whose value is a secret."""
# key=value / key: value where the key names a secret; only the value is cut.
_ASSIGNED = re.compile(r"(?i)\b([A-Z0-9_]*(?:%s)[A-Z0-9_]*)(\s*[:=]\s*['\"]?)([^\s'\"]{8,})" % _SECRET_WORDS)


class Redactor:
    def __init__(self, known: Iterable[str] = ()) -> None:
        # Longest first, so a secret containing another is cut whole; short values would cut too much.
        self.known = sorted({value for value in known if value and len(value) >= 6}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for value in self.known:
            if value in text:
                text = text.replace(value, "[REDACTED]")
        for kind, pattern in SECRET_SHAPES.items():
            text = pattern.sub(f"[REDACTED:{kind}]", text)
        return _ASSIGNED.sub(lambda m: f"{m.group(1)}{m.group(2)}[REDACTED]", text)


def clip(text: str, limit: int) -> str:
    """Keep the head and the tail of a long text, saying how much of the middle was cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return (
        text[:head]
        + f"\n\n[... {len(text) - head - tail:,} characters cut; the first {head:,} and the last {tail:,} "
        + "are shown ...]\n\n"
        + text[-tail:]
    )
