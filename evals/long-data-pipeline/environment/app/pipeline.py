"""Summarise the records in data/*.jsonl into out/summary.json."""

import configparser
import json
from collections import Counter
from pathlib import Path

config = configparser.ConfigParser()
config.read("config/pipeline.ini")
threshold = config.getint("pipeline", "threshold")
kept, total, categories = 0, 0, Counter()
for path in sorted(Path("data").glob("*.jsonl")):
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["amount"] >= threshold:
            kept += 1
            total += record["amount"]
            categories[record.get("category", "none")] += 1
Path("out").mkdir(exist_ok=True)
summary = {"threshold": threshold, "records": kept, "total": total, "categories": dict(sorted(categories.items()))}
Path("out/summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
