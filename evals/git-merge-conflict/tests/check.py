"""main is a merge of itself and feature with the asked resolution."""

import configparser
import subprocess
import sys


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", "/app/project", *args], capture_output=True, text=True, check=True).stdout


problems = []
parents = git("rev-list", "--parents", "-n1", "main").split()[1:]
feature = git("rev-parse", "feature").strip()
if len(parents) != 2 or feature not in parents:
    problems.append(f"main's head is not a merge with feature (parents {parents})")
config = configparser.ConfigParser()
config.read_string(git("show", "main:service.ini"))
wanted = {"name": "inventory-api", "port": "9000", "workers": "4"}
got = dict(config["service"]) if config.has_section("service") else {}
if got != wanted:
    problems.append(f"service.ini is {got}")
files = set(git("ls-tree", "--name-only", "main").split())
if not {"app.py", "feature.py", "service.ini"} <= files:
    problems.append(f"main has {sorted(files)}")
if git("rev-parse", "--abbrev-ref", "HEAD").strip() != "main" or git("status", "--porcelain").strip():
    problems.append("main is not checked out clean")
if problems:
    sys.exit("; ".join(problems))
