"""The sum of the served file's quantities (547)."""

import sys
from pathlib import Path

try:
    got = Path("/app/total.txt").read_text().strip()
except OSError as exc:
    sys.exit(f"no /app/total.txt: {exc}")
if got != "547":
    sys.exit(f"/app/total.txt holds {got!r}, not 547")
