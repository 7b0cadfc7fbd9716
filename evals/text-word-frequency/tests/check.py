"""The 5 most frequent words of /app/book.txt, computed again here."""

import collections
import re
import sys
from pathlib import Path

words = re.findall(r"[a-z]+", Path("/app/book.txt").read_text().lower())
counts = collections.Counter(words)
expected = [f"{n} {w}" for w, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:5]]
try:
    got = Path("/app/top.txt").read_text().split("\n")
except OSError as exc:
    sys.exit(f"no /app/top.txt: {exc}")
got = [line.strip() for line in got if line.strip()]
if got != expected:
    sys.exit(f"expected {expected}, got {got}")
