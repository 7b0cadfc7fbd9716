#!/bin/bash
set -euo pipefail
cd /app
mkdir -p data out
tar -xzf incoming/batch.tar.gz -C /app
python3 - <<'PY'
import json
from pathlib import Path

rejected = []
for path in sorted(Path("/app/data").glob("*.jsonl")):
    good = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        try:
            record = json.loads(line)
            record["amount"]
        except (ValueError, KeyError, TypeError):
            rejected.append(f"{path.name}:{number}")
            continue
        good.append(line)
    path.write_text("".join(f"{line}\n" for line in good))
Path("/app/out/rejected.txt").write_text("".join(f"{r}\n" for r in rejected))
PY
sed -i 's/^threshold = .*/threshold = 50/' config/pipeline.ini
python3 pipeline.py
printf 'data/\nincoming/\n' > .gitignore
git add .gitignore config/pipeline.ini out/summary.json out/rejected.txt
git -c user.name=Agent -c user.email=agent@example.test commit -qm "Pipeline run 2026-12"
