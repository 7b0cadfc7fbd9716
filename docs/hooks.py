"""MkDocs hook: a page that says `<!-- generated: NAME -->` gets the reference NAME generated from the
code at build time (docs/refgen/), so the configuration, CLI and HTTP references are never hand-kept."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

# MkDocs puts this directory on sys.path only while it loads the hook: the generators (and this
# checkout's packages, ahead of any installed copy) are imported now.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from refgen.cli_ref import cli_reference  # noqa: E402
from refgen.openapi_ref import http_reference  # noqa: E402
from refgen.settings_ref import settings_reference  # noqa: E402

GENERATORS = {"settings": settings_reference, "cli": cli_reference, "http": http_reference}
MARKER = re.compile(r"<!-- generated: ([a-z]+) -->")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def expand(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise ValueError(f"{page.file.src_path}: no generated reference named {name!r}")
        return GENERATORS[name]()

    return MARKER.sub(expand, markdown)
