"""Long strings as raw bytes after their line: the channel against a scripted peer that cuts its
replies into small writes, and against announcements a confused runtime could make."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends import SandboxGone
from backends import channel as channel_mod
from backends.channel import Channel, PipeTransport

# The peer: for each request line it reads, writes the next scripted reply (its "{id}" replaced by the
# request's id) in pieces of PIECE bytes, so messages and their raw bytes arrive cut anywhere.
PEER = r"""
import json, os, sys
replies = json.load(open(sys.argv[1]))
piece = int(sys.argv[2])
for line in sys.stdin.buffer:
    req = json.loads(line)
    data = replies.pop(0).replace("{id}", str(req["id"])).encode("latin-1")
    for at in range(0, len(data), piece):
        os.write(1, data[at : at + piece])
"""


def frame(head: dict[str, object], fields: dict[str, str]) -> str:
    """A message with its string fields as raw bytes, as latin-1 text (the peer writes it back as bytes)."""
    body = [value.encode("utf-8", "surrogatepass") for value in fields.values()]
    head = {**head, "raw": [[name, len(data)] for name, data in zip(fields, body, strict=True)]}
    return (json.dumps(head).replace('"ID"', "{id}").encode() + b"\n" + b"".join(body)).decode("latin-1")


@pytest.fixture
def peer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Channel]:
    replies, piece = request.param
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies))
    proc = subprocess.Popen(
        [sys.executable, "-c", PEER, str(script), str(piece)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    channel = Channel(PipeTransport(proc, "peer"), "scripted peer")
    yield channel
    channel.close()
    proc.kill()
    proc.wait()


TEXT = 'é😀 "quoted" \\ \ud800 tab\tend\n' * 3000  # every kind of character JSON would escape


@pytest.mark.parametrize(
    "peer",
    [
        (
            [
                frame({"method": "proc.output", "params": {"request": "ID"}}, {"data": TEXT[:50_000]})
                + frame({"id": "ID", "result": {"path": "/x", "more": False}}, {"content": TEXT, "b": "x"})
                + '{"id": 99, "result": {}}\n'  # a reply nobody waits for, after the raw bytes
            ],
            7,  # 7-byte writes: every boundary falls inside a UTF-8 sequence somewhere
        )
    ],
    indirect=True,
)
def test_raw_fields_come_back_exactly_however_the_stream_is_cut(peer: Channel) -> None:
    notes: list[tuple[str, dict[str, object]]] = []
    result = peer.call("fs.read", {"path": "x"}, timeout=60, on_notify=lambda m, p: notes.append((m, p)))
    assert result == {"path": "/x", "more": False, "content": TEXT, "b": "x"}
    assert notes == [("proc.output", {"request": 1, "data": TEXT[:50_000]})]
    assert not peer.closed


@pytest.mark.parametrize(
    "peer",
    [
        (['{"id": {id}, "result": {}, "raw": [["content", %d]]}\n' % (channel_mod.RAW_MAX + 1)], 4096),
        (['{"id": {id}, "result": {}, "raw": [["content", -5]]}\n'], 4096),
        (['{"id": {id}, "result": {}, "raw": "content"}\n'], 4096),
    ],
    indirect=True,
)
def test_a_bad_raw_announcement_ends_the_channel_with_the_reason(peer: Channel) -> None:
    """Where its bytes end cannot be known, so nothing after it can be trusted: the channel closes, and
    the caller hears why instead of waiting for (or buffering) bytes that never come."""
    with pytest.raises(SandboxGone, match="bad raw announcement"):
        peer.call("fs.read", {"path": "x"}, timeout=60)
    assert peer.closed


@pytest.mark.parametrize(
    "peer", [(['{"id": {id}, "result": {}, "raw": [["content", 2]]}\n\xff\xfe'], 4096)], indirect=True
)
def test_raw_bytes_that_are_not_utf8_end_the_channel(peer: Channel) -> None:
    with pytest.raises(SandboxGone, match="not UTF-8"):
        peer.call("fs.read", {"path": "x"}, timeout=60)


@pytest.mark.parametrize("peer", [(["x" * 3_000_000], 65536)], indirect=True)
def test_a_line_that_never_ends_is_not_buffered_without_bound(
    peer: Channel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(channel_mod, "RAW_MAX", 1_000_000)
    with pytest.raises(SandboxGone, match="a line of over 1000000 bytes"):
        peer.call("fs.read", {"path": "x"}, timeout=60)
