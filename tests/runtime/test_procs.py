"""Background processes, on every backend."""

from __future__ import annotations

from backends import Sandbox


def test_spawn_write_wait_and_read_the_log(sandbox: Sandbox) -> None:
    proc = sandbox.call("proc.spawn", {"command": "echo ready; read name; echo hello $name; exit 4"})
    assert proc["running"]
    sandbox.call("proc.write", {"id": proc["id"], "data": "world\n"})
    done = sandbox.call("proc.wait", {"id": proc["id"], "timeout": 30})
    assert done["exit_code"] == 4 and not done["running"]
    assert sandbox.call("proc.log", {"id": proc["id"]})["text"] == "ready\nhello world\n"


def test_log_is_rolling_and_readable_from_an_offset(sandbox: Sandbox) -> None:
    proc = sandbox.call("proc.spawn", {"command": "seq 1 100000", "log_limit": 1000})
    sandbox.call("proc.wait", {"id": proc["id"], "timeout": 30})
    log = sandbox.call("proc.log", {"id": proc["id"], "offset": 0})
    assert log["text"].endswith("99999\n100000\n") and len(log["text"]) <= 1000
    assert log["dropped_bytes"] == log["offset"] - 1000
    assert sandbox.call("proc.log", {"id": proc["id"], "offset": log["offset"]})["text"] == ""
    assert sandbox.call("proc.log", {"id": proc["id"], "tail": 2})["text"] == "99999\n100000"


def test_kill_stops_the_process_and_its_children(sandbox: Sandbox) -> None:
    proc = sandbox.call("proc.spawn", {"command": "sleep 301 & sleep 301; wait"})
    killed = sandbox.call("proc.kill", {"id": proc["id"]})
    assert not killed["running"]
    left = sandbox.run("pgrep -c -f 'sleep 301' || true")["output"].strip()
    assert left == "0"
    assert any(p["id"] == proc["id"] for p in sandbox.call("proc.list")["processes"])
