"""Process-table helpers: kill everything in a session, steer the OOM killer away from the runtime."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator


def processes() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, the fields of /proc/PID/stat after the command name) of each live (not zombie) process;
    field 0 is the state, 1 the parent, 2 the process group, 3 the session (proc(5) numbering minus 3)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # Fields after the command name, which may itself hold spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 3 and fields[0] != b"Z":
            yield int(entry), fields


def session_members(sid: int) -> list[int]:
    """Live (not zombie) pids whose session id is `sid`, the leader included, from /proc."""
    return [pid for pid, fields in processes() if int(fields[3]) == sid]


def kill_session(sid: int, sweeps: int = 50) -> None:
    """SIGKILL every process of a session until none is left. Each of its process groups is killed
    at once (killpg is atomic against fork: a fork bomb cannot refill the slots one pid at a time
    frees, which a sweep per pid races, slowly when the bomb starves the runtime of CPU)."""
    for _ in range(sweeps):
        members = [(pid, int(fields[2])) for pid, fields in processes() if int(fields[3]) == sid]
        if not members:
            return
        for group in {group for _, group in members}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        for pid, _ in members:  # a member whose group left the session
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def prefer_for_oom_kill() -> None:
    """In a child: raise its OOM score so a memory hog dies before the runtime does."""
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("500")
    except OSError:
        pass
