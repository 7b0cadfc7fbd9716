"""The service's files, its user, and its answers."""

import configparser
import grp
import json
import os
import pwd
import stat
import sys
import urllib.error
import urllib.request
from pathlib import Path

problems = []
try:
    user = pwd.getpwnam("notes")
    if (user.pw_uid, user.pw_gid, grp.getgrgid(user.pw_gid).gr_name) != (1500, 1500, "notes"):
        problems.append("notes is not uid/gid 1500")
except KeyError:
    sys.exit("there is no user notes")


def check(path: str, uid: int, gid: int, mode: int) -> None:
    try:
        info = os.stat(path)
    except OSError as exc:
        problems.append(f"{path}: {exc}")
        return
    if (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) != (uid, gid, mode):
        problems.append(f"{path}: uid {info.st_uid} gid {info.st_gid} mode {stat.S_IMODE(info.st_mode):o}")


check("/opt/notes/notes_app.py", 0, 0, 0o755)
check("/var/lib/notes", 1500, 1500, 0o700)
check("/etc/notes/notes.conf", 0, 1500, 0o640)
if os.path.exists("/var/log/notes.log") and os.stat("/var/log/notes.log").st_uid != 1500:
    problems.append("/var/log/notes.log is not owned by notes")
token = Path("/app/notes/token.txt").read_text().strip()
config = configparser.ConfigParser()
config.read("/etc/notes/notes.conf")
settings = dict(config["server"]) if config.has_section("server") else {}
if settings != {"port": "9090", "token": token, "data_dir": "/var/lib/notes"}:
    problems.append("notes.conf does not hold the asked settings")
runs_as = [int(line.split()[1]) for pid in os.listdir("/proc") if pid.isdigit()
           for cmd in [Path(f"/proc/{pid}/cmdline").read_bytes() if Path(f"/proc/{pid}/cmdline").exists() else b""]
           if b"notes_app.py" in cmd and b"runuser" not in cmd
           for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("Uid:")]
if not runs_as or any(uid != 1500 for uid in runs_as):
    problems.append(f"the service's processes run as uids {runs_as}, not 1500")


def get(auth: str | None) -> tuple[int, object]:
    request = urllib.request.Request("http://127.0.0.1:9090/notes")
    if auth:
        request.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError as exc:
        return 0, str(exc)


if get(f"Bearer {token}") != (200, ["first note"]):
    problems.append(f"GET /notes gives {get(f'Bearer {token}')}, not the one note")
if get(None)[0] != 401:
    problems.append("GET /notes without the token is not refused")
if problems:
    sys.exit("; ".join(problems))
