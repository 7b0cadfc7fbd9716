"""report.csv against the totals computed here (in cents, so no float drift)."""

import csv
import sys
from collections import defaultdict
from pathlib import Path

totals: dict[str, int] = defaultdict(int)
with open("/app/sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        if row["region"]:
            totals[row["region"]] += round(float(row["amount"] or 0) * 100)
expected = ["region,total"] + [f"{r},{c // 100}.{c % 100:02d}" for r, c in sorted(totals.items(), key=lambda i: -i[1])]
try:
    got = [line.strip() for line in Path("/app/report.csv").read_text().splitlines() if line.strip()]
except OSError as exc:
    sys.exit(f"no /app/report.csv: {exc}")
if got != expected:
    sys.exit(f"expected {expected}, got {got}")
