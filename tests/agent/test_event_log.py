"""The run log's rotation (logs/events.jsonl): by size, its size counted rather than asked of the file."""

from __future__ import annotations

import json
from pathlib import Path

from control_plane.agent.event_log import EventLog
from control_plane.events import Notice, TextDelta


def _lines(home: Path) -> list[str]:
    """Every logged message, oldest first, across the rotated files."""
    logs = home / "logs"
    files = sorted(logs.glob("events.jsonl.*"), key=lambda p: -int(p.suffix[1:])) + [logs / "events.jsonl"]
    return [json.loads(line)["message"] for f in files for line in f.read_text().splitlines()]


def test_the_log_rotates_at_its_size_keeps_every_record_and_counts_what_was_there(tmp_path: Path) -> None:
    log = EventLog(tmp_path, max_bytes=1000, keep=5)
    for n in range(20):
        log.write(Notice(session_id="s", message=f"record {n:02d} " + "x" * 40))
        log.write(TextDelta(session_id="s", text="streamed, not logged"))
    log.close()
    files = sorted((tmp_path / "logs").iterdir())
    assert len(files) > 1, "the log rotated"
    assert all(f.stat().st_size < 1000 for f in files), "no file passed its size"
    assert _lines(tmp_path) == [f"record {n:02d} " + "x" * 40 for n in range(20)]
    # a second process goes on from the file's size, not from zero
    before = (tmp_path / "logs" / "events.jsonl").stat().st_size
    again = EventLog(tmp_path, max_bytes=1000, keep=5)
    for n in range(20, 40):
        again.write(Notice(session_id="s", message=f"record {n:02d} " + "x" * 40))
    again.close()
    assert before > 0 and all(f.stat().st_size < 1000 for f in (tmp_path / "logs").iterdir())
    assert _lines(tmp_path)[-5:] == [f"record {n:02d} " + "x" * 40 for n in range(35, 40)]
