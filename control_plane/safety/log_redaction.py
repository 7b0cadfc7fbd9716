"""Secrets kept out of the process's own log lines: libraries log request URLs (httpx at INFO:
`HTTP Request: POST https://api.telegram.org/bot<token>/getUpdates`), and a user pastes `-v` output
into a bug report. Every record leaves through the same Redactor the model's view uses, plus the one
shape that lives in a URL path."""

from __future__ import annotations

import logging
import re

from .redaction import Redactor

BOT_TOKEN_PATH = re.compile(r"/bot\d+:[A-Za-z0-9_\-]+")
"""Telegram's Bot API puts the token in the path: /bot123456:ABC.../method."""


class RedactingFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._redact = Redactor()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed record: logging reports it as it would anyway
            return True
        clean = self._redact(BOT_TOKEN_PATH.sub("/bot[REDACTED]", message))
        if clean != message:
            record.msg, record.args = clean, None
        return True


def redact_log_handlers(logger: logging.Logger | None = None) -> None:
    """Give every handler of `logger` (the root logger) the filter, once."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
