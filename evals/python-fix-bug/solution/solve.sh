#!/bin/bash
set -euo pipefail
cd /app/stats
python3 - <<'PY'
from pathlib import Path

path = Path("stats.py")
text = path.read_text()
text = text.replace(
    "    return ordered[middle]\n",
    "    if len(ordered) % 2:\n        return ordered[middle]\n"
    "    return (ordered[middle - 1] + ordered[middle]) / 2\n",
)
text = text.replace("rank = p / 100 * len(ordered)", "rank = p / 100 * (len(ordered) - 1)")
path.write_text(text)
PY
python3 -m unittest -q
