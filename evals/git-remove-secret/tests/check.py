"""The token gone from every object; the history otherwise the same."""

import subprocess
import sys


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", "/app/repo", *args], capture_output=True, text=True, check=True).stdout


problems = []
objects = git("cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split()
for name in objects:
    if "sk-live-7f3a9c21e5" in subprocess.run(
        ["git", "-C", "/app/repo", "cat-file", "-p", name], capture_output=True, text=True, errors="replace"
    ).stdout:
        problems.append(f"object {name} still holds the token")
        break
if "credentials.txt" in git("log", "--all", "--name-only", "--format="):
    problems.append("credentials.txt is still in the history")
messages = git("log", "--format=%s", "main").splitlines()
if messages != ["Describe the service", "Count any iterable", "Add counting and local config", "Start the inventory service"]:
    problems.append(f"commit messages are {messages}")
dates = git("log", "--format=%an %aI", "main").split("\n")[:4]
if dates[-1] != "Dev 2026-01-01T10:00:00Z" and not dates[-1].startswith("Dev 2026-01-01T10:00:00"):
    problems.append(f"author dates changed: {dates}")
if git("status", "--porcelain").strip():
    problems.append("the working tree is not clean")
if git("rev-parse", "--abbrev-ref", "HEAD").strip() != "main":
    problems.append("main is not checked out")
if git("show", "main:inventory.py") != "def count(items):\n    return len(list(items))\n":
    problems.append("inventory.py changed")
if problems:
    sys.exit("; ".join(problems))
