"""Owners and modes under /app/deploy."""

import grp
import pwd
import stat
import sys
from pathlib import Path

problems = []
try:
    user = pwd.getpwnam("svc")
    if user.pw_uid != 2000 or grp.getgrgid(user.pw_gid).gr_name != "svc" or user.pw_gid != 2000:
        problems.append(f"svc is uid {user.pw_uid} gid {user.pw_gid}, not 2000/2000")
except KeyError:
    sys.exit("there is no user svc")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def owned_by_svc(path: Path) -> bool:
    return path.stat().st_uid == 2000 and path.stat().st_gid == 2000


root = Path("/app/deploy")
for script in (root / "bin").glob("*.sh"):
    if mode(script) != 0o755:
        problems.append(f"{script} has mode {mode(script):o}")
secret = root / "config" / "secret.env"
if mode(secret) != 0o600 or not owned_by_svc(secret):
    problems.append(f"{secret}: mode {mode(secret):o}, uid {secret.stat().st_uid}")
for other in (root / "config").iterdir():
    if other != secret and mode(other) != 0o644:
        problems.append(f"{other} has mode {mode(other):o}")
logs = root / "logs"
for path in [logs, *logs.rglob("*")]:
    if mode(path) != 0o750 or not owned_by_svc(path):
        problems.append(f"{path}: mode {mode(path):o}, uid {path.stat().st_uid}")
if secret.read_text() != "DB_PASSWORD=hunter2\n":
    problems.append("secret.env's content changed")
if problems:
    sys.exit("; ".join(problems))
