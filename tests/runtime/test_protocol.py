"""The wire protocol, spoken to a runtime process directly: bad input gets errors, never a crash."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sandboxes
from backends import Sandbox
from backends.bundle import BOOTSTRAP, zip_package
from sandboxes import PROTOCOL_VERSION, code_hash, protocol

REPO = Path(__file__).resolve().parents[2]


class RawRuntime:
    def __init__(self, tmp: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sandboxes"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=tmp,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        )

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def receive(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        return json.loads(self.proc.stdout.readline())

    def request(self, req_id: int, method: str, params: Any = None) -> dict[str, Any]:
        self.send(
            json.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params or {}}).encode()
        )
        return self.receive()


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[RawRuntime]:
    runtime = RawRuntime(tmp_path)
    yield runtime
    runtime.proc.kill()
    runtime.proc.wait()


def test_requests_before_the_handshake_are_refused(raw: RawRuntime) -> None:
    assert raw.request(1, "sys.ping")["error"]["code"] == protocol.NOT_INITIALIZED
    bad = raw.request(2, "sys.hello", {"protocol": 99})
    assert bad["error"]["code"] == protocol.PROTOCOL_MISMATCH
    hello = raw.request(3, "sys.hello", {"protocol": PROTOCOL_VERSION})["result"]
    assert hello["code_hash"] == code_hash() and hello["protocol"] == PROTOCOL_VERSION


def test_malformed_input_gets_error_objects_and_the_runtime_keeps_serving(raw: RawRuntime) -> None:
    raw.request(1, "sys.hello", {"protocol": PROTOCOL_VERSION})
    raw.send(b"{not json")
    assert raw.receive()["error"]["code"] == protocol.PARSE_ERROR
    raw.send(b'{"id": 5}')
    assert raw.receive() == {
        "jsonrpc": "2.0",
        "id": 5,
        "error": {"code": protocol.INVALID_REQUEST, "message": "a request needs a method"},
    }
    assert raw.request(6, "no.such")["error"]["code"] == protocol.METHOD_NOT_FOUND
    assert raw.request(7, "fs.read", {"nope": 1})["error"]["code"] == protocol.INVALID_PARAMS
    assert raw.request(8, "shell.run", {"command": 42})["error"]["code"] == protocol.INVALID_PARAMS
    assert raw.request(9, "fs.write", {"path": "x", "data": "!!"})["error"]["code"] == protocol.INVALID_PARAMS
    assert raw.request(10, "sys.ping") == {"jsonrpc": "2.0", "id": 10, "result": {"pong": True}}


def test_a_long_command_does_not_block_other_requests(sandbox: Sandbox, session: str) -> None:
    finished: list[str] = []
    slow = threading.Thread(target=lambda: (sandbox.run("sleep 2", session=session), finished.append("slow")))
    slow.start()
    sandbox.run("true", session=session + "-other")
    sandbox.call("fs.stat", {"path": "."})
    finished.append("fast")
    slow.join()
    assert finished == ["fast", "slow"]


def test_stray_output_from_commands_never_reaches_the_channel(sandbox: Sandbox, session: str) -> None:
    # The runtime's own stdin/stdout are private: a process writing to fd 1 of the runtime,
    # or reading fd 0, sees /dev/null and stderr.
    result = sandbox.run(
        "cat /proc/$PPID/fd/0 >/dev/null 2>&1; echo '{\"id\":1}' > /proc/$PPID/fd/1 2>/dev/null; echo ok",
        session=session,
    )
    assert result["output"].endswith("ok\n")
    assert sandbox.call("sys.ping") == {"pong": True}


@pytest.mark.timeout(120)
def test_chatter_on_the_runtimes_stderr_never_stalls_the_channel(sandbox: Sandbox, session: str) -> None:
    """The runtime's stderr (its log) runs beside the protocol; a reader woken by stderr data must not
    then block on an empty stdout (paramiko's fileno() turns readable on either)."""
    sandbox.run(
        "(for i in $(seq 3000); do echo chatter > /proc/$PPID/fd/2; done) >/dev/null 2>&1 &", session=session
    )
    for _ in range(300):
        assert sandbox.call("sys.ping", timeout=30) == {"pong": True}


def test_concurrent_large_requests_do_not_interleave(sandbox: Sandbox, session: str) -> None:
    blobs = {f"{session}/big{i}.txt": str(i) * 3_000_000 for i in range(4)}  # each line ~3 MB
    threads = [threading.Thread(target=sandbox.call, args=("fs.write", {"path": p, "content": c}))
               for p, c in blobs.items()]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for path, content in blobs.items():
        assert sandbox.call("fs.stat", {"path": path})["size"] == len(content)
    assert sandbox.call("sys.ping") == {"pong": True}


def test_long_strings_go_as_raw_bytes_both_ways_once_the_client_asks(raw: RawRuntime, tmp_path: Path) -> None:
    assert raw.request(1, "sys.hello", {"protocol": PROTOCOL_VERSION, "raw": True})["result"]["raw"] is True
    text = 'é😀 "q" \\ \udc80 tab\tend\r\n' * 5000  # \udc80: the byte 0x80, as surrogateescape reads it
    body = text.encode("utf-8", "surrogatepass")
    head = {"jsonrpc": "2.0", "id": 2, "method": "fs.write", "params": {"path": "big.txt"}}
    raw.send(json.dumps({**head, "raw": [["content", len(body)]]}).encode() + b"\n" + body)
    on_disk = text.encode("utf-8", "surrogateescape")
    assert raw.receive()["result"]["bytes"] == len(on_disk)
    assert (tmp_path / "big.txt").read_bytes() == on_disk

    read = {"path": "big.txt", "numbered": False, "limit": 10_000}
    raw.send(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "fs.read", "params": read}).encode())
    reply = raw.receive()
    assert "content" not in reply["result"] and reply["raw"][0][0] == "content"
    assert raw.proc.stdout is not None
    content = raw.proc.stdout.read(reply["raw"][0][1]).decode("utf-8", "surrogatepass")
    plain = RawRuntime(tmp_path)  # a client that did not ask gets the same result on one line
    try:
        plain.request(1, "sys.hello", {"protocol": PROTOCOL_VERSION})
        assert plain.request(2, "fs.read", read)["result"] == {**reply["result"], "content": content}
    finally:
        plain.proc.kill()
        plain.proc.wait()
    assert content.startswith('é😀 "q" \\ \ufffd tab\tend\né😀') and reply["result"]["total_lines"] == 5000

    raw.send(json.dumps({**head, "id": 4, "raw": [["content", -1]]}).encode())
    assert raw.receive()["error"]["code"] == protocol.INVALID_REQUEST
    assert raw.request(5, "fs.stat", {"path": "big.txt"})["result"]["size"] == len(on_disk)  # short: a line


def test_the_runtime_sent_down_the_stream_starts_from_files_dated_1970(tmp_path: Path) -> None:
    """A sandbox whose image has a stale runtime gets the current one as a zip on its stdin (the
    bootstrap). A reproducible image build dates its files 1970, before what ZIP can hold: the compose
    control plane failed every such sandbox with "ZIP does not support timestamps before 1980"."""
    source = tmp_path / "sandboxes"
    shutil.copytree(REPO / "sandboxes", source, ignore=shutil.ignore_patterns("__pycache__"))
    files = sandboxes.source_files()
    for rel in files:
        os.utime(source / rel, (0, 0))
    payload = zip_package(source, files)
    assert payload == zip_package(REPO / "sandboxes", files)  # the same code, the same bytes
    hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "sys.hello", "params": {"protocol": 1}})
    done = subprocess.run(
        [sys.executable, "-c", BOOTSTRAP],
        input=b"%016d" % len(payload) + payload + hello.encode() + b"\n",
        capture_output=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},  # no PYTHONPATH: the runtime comes only from the stream
        timeout=60,
    )
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["result"]["code_hash"] == code_hash(), done.stderr
