"""The code the page's script assembles."""

import sys
from pathlib import Path

try:
    got = Path("/app/code.txt").read_text().strip()
except OSError as exc:
    sys.exit(f"no /app/code.txt: {exc}")
if got != "RIVER-417":
    sys.exit(f"/app/code.txt holds {got!r}")
