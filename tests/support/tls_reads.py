"""Counting reads of a certificate store: a TLS context made per client or per loop shows up as one each."""

from __future__ import annotations

import ssl
from typing import Any

import pytest


def certificate_reads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """From now on, each `load_verify_locations` (what reading a store comes down to) adds an entry."""
    reads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def spy(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        reads.append((context, args))
        load(context, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", spy)
    return reads
