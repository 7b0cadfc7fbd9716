"""proc.attach on every backend: a process's raw stdout streamed over the runtime's one stream as it
comes, its stderr kept apart (how an MCP stdio server's messages travel out of its sandbox)."""

from __future__ import annotations

import base64
import threading
from typing import Any

from backends import Sandbox


def test_attach_streams_stdout_and_keeps_stderr_apart(sandbox: Sandbox) -> None:
    started = sandbox.call(
        "proc.spawn",
        {
            "command": 'echo to-stderr >&2; echo ready; while read -r l; do echo "got $l"; done',
            "separate_stderr": True,
        },
    )
    chunks: list[bytes] = []
    seen_ready = threading.Event()
    done: list[dict[str, Any]] = []

    def on_output(method: str, params: dict[str, Any]) -> None:
        assert method == "proc.output"
        chunks.append(base64.b64decode(params["data"]))
        if b"ready" in b"".join(chunks):
            seen_ready.set()

    reader = threading.Thread(
        target=lambda: done.append(
            sandbox.call("proc.attach", {"id": started["id"]}, timeout=60, on_notify=on_output)
        )
    )
    reader.start()
    assert seen_ready.wait(30)  # output arrives while the process runs, not at its end
    sandbox.call("proc.write", {"id": started["id"], "data": "one\n"})
    sandbox.call("proc.write", {"id": started["id"], "data": "two\n", "eof": True})
    reader.join(60)
    assert b"".join(chunks) == b"ready\ngot one\ngot two\n"  # raw bytes, and no stderr among them
    assert done and done[0]["exit_code"] == 0 and done[0]["stderr"] == "to-stderr\n"

    # a late attach gets what was written from its offset on, then the end at once
    late: list[bytes] = []
    status = sandbox.call(
        "proc.attach",
        {"id": started["id"], "offset": 6},
        timeout=30,
        on_notify=lambda method, params: late.append(base64.b64decode(params["data"])),
    )
    assert b"".join(late) == b"got one\ngot two\n" and not status["running"]
