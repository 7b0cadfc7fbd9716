"""Every step's outcome: the data cleaned, the rejects listed, the config, the summary, the commit."""

import configparser
import json
import subprocess
import sys
from pathlib import Path

REJECTED = ["a.jsonl:4", "a.jsonl:9", "b.jsonl:1", "b.jsonl:12"]
problems = []


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", "/app", *args], capture_output=True, text=True, check=True).stdout


records = []
for name in ("a.jsonl", "b.jsonl"):
    path = Path("/app/data") / name
    if not path.is_file():
        sys.exit(f"{path} is missing")
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
            records[-1]["amount"]
        except (ValueError, KeyError) as exc:
            problems.append(f"{name} still has a broken line: {exc}")
if len(records) != 26:
    problems.append(f"{len(records)} good records left, not 26")
rejected = Path("/app/out/rejected.txt")
if not rejected.is_file() or rejected.read_text().split() != REJECTED:
    problems.append("out/rejected.txt is missing or wrong")
config = configparser.ConfigParser()
config.read("/app/config/pipeline.ini")
if config.get("pipeline", "threshold", fallback="") != "50" or config.get("pipeline", "name", fallback="") != "monthly":
    problems.append("config/pipeline.ini does not have threshold 50 and name monthly")
kept = [r for r in records if r.get("amount", 0) >= 50]
try:
    summary = json.loads(Path("/app/out/summary.json").read_text())
    if summary["records"] != len(kept) or summary["total"] != sum(r["amount"] for r in kept) or summary["threshold"] != 50:
        problems.append(f"out/summary.json is {summary}")
except (OSError, ValueError, KeyError) as exc:
    problems.append(f"out/summary.json: {exc}")
try:
    if git("log", "-1", "--format=%s").strip() != "Pipeline run 2026-12":
        problems.append("the last commit is not 'Pipeline run 2026-12'")
    if git("rev-list", "--count", "HEAD").strip() != "2":
        problems.append("not exactly one new commit")
    tree = set(git("ls-tree", "-r", "--name-only", "HEAD").split())
    if not {".gitignore", "config/pipeline.ini", "out/summary.json", "out/rejected.txt"} <= tree:
        problems.append(f"the commit holds {sorted(tree)}")
    if any(name.startswith(("data/", "incoming/")) for name in tree):
        problems.append("data/ or incoming/ is in the repository")
    if git("status", "--porcelain").strip():
        problems.append("git status is not clean")
except subprocess.CalledProcessError as exc:
    problems.append(f"git: {exc.stderr.strip()}")
if problems:
    sys.exit("; ".join(problems))
