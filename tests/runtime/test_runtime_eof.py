"""The runtime at the end of its input: every request it read is answered before it exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sandboxes import PROTOCOL_VERSION

REPO = Path(__file__).resolve().parents[2]


def run_burst(tmp: Path, requests: list[dict[str, object]], **env: str) -> dict[object, dict[str, object]]:
    """Write every request at once, close stdin, and collect the replies by id until the runtime exits."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandboxes"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=tmp,
        env={"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"], **env},
    )
    lines = "".join(json.dumps({"jsonrpc": "2.0", **r}) + "\n" for r in requests).encode()
    out, _ = proc.communicate(lines, timeout=60)
    assert proc.returncode == 0
    return {r["id"]: r for r in map(json.loads, out.splitlines()) if "id" in r}


def test_a_burst_then_eof_gets_every_reply(tmp_path: Path) -> None:
    hello = {"id": 0, "method": "sys.hello", "params": {"protocol": PROTOCOL_VERSION}}
    burst: list[dict[str, object]] = [hello]
    for i in range(1, 61):
        match i % 4:
            case 0:
                burst.append({"id": i, "method": "fs.list", "params": {"path": "."}})
            case 1:
                burst.append({"id": i, "method": "fs.write", "params": {"path": f"f{i}", "content": str(i)}})
            case 2:  # still running when the stream ends
                burst.append(
                    {
                        "id": i,
                        "method": "shell.run",
                        "params": {"command": f"sleep 0.2; echo {i}", "session": f"s{i}"},
                    }
                )
            case 3:
                burst.append({"id": i, "method": "browser.navigate", "params": {"url": "about:blank"}})
    replies = run_burst(tmp_path, burst)
    assert sorted(replies, key=int) == list(range(61))  # type: ignore[arg-type]
    for i in range(2, 61, 4):
        assert replies[i]["result"]["output"].strip() == str(i)  # type: ignore[index]
    assert (tmp_path / "f1").read_text() == "1"


def test_the_drain_is_bounded(tmp_path: Path) -> None:
    """A request still running when the bound is reached does not keep the runtime alive."""
    burst: list[dict[str, object]] = [
        {"id": 0, "method": "sys.hello", "params": {"protocol": PROTOCOL_VERSION}},
        {"id": 1, "method": "shell.run", "params": {"command": "sleep 600", "timeout": 900}},
        {"id": 2, "method": "fs.write", "params": {"path": "done", "content": "yes"}},
    ]
    replies = run_burst(tmp_path, burst, HERMETIC_DRAIN_SECONDS="1")  # within communicate's 60 s
    assert {0, 2} <= set(replies)
    assert (tmp_path / "done").read_text() == "yes"
