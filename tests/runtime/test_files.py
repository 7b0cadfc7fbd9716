"""File operations without the shell, on every backend."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from backends import RuntimeCallError, Sandbox
from sandboxes import protocol


def _error(sandbox: Sandbox, method: str, **params: object) -> RuntimeCallError:
    with pytest.raises(RuntimeCallError) as err:
        sandbox.call(method, params)
    return err.value


def test_write_then_paged_read_with_line_numbers(sandbox: Sandbox, session: str) -> None:
    content = "".join(f"line {i}\n" for i in range(1, 101))
    written = sandbox.call("fs.write", {"path": f"{session}/a.txt", "content": content})
    assert written["bytes"] == len(content)
    page = sandbox.call("fs.read", {"path": f"{session}/a.txt", "offset": 10, "limit": 3})
    assert page["content"] == "    10\tline 10\n    11\tline 11\n    12\tline 12"
    assert page["total_lines"] == 100 and page["more"]
    raw = sandbox.call("fs.read", {"path": f"{session}/a.txt", "numbered": False, "limit": 1000})
    assert raw["content"] + "\n" == content and not raw["more"]


def test_a_large_text_round_trips_exactly(sandbox: Sandbox, session: str) -> None:
    """Over RAW_MIN, content travels as raw bytes after its line (both ways): every character JSON
    would escape, multi-byte ones, and a byte that is not UTF-8 (surrogateescape) arrive as written."""
    text = 'é😀 "q" \\ \udcff\ttab\n' * 40_000
    path = f"{session}/big.txt"
    on_disk = text.encode("utf-8", "surrogateescape")
    assert sandbox.call("fs.write", {"path": path, "content": text})["bytes"] == len(on_disk)
    digest = sandbox.run(f"sha256sum {path}")["output"].split()[0]
    assert digest == hashlib.sha256(on_disk).hexdigest()
    got = sandbox.call("fs.read", {"path": path, "numbered": False, "limit": 50_000})
    assert got["content"] + "\n" == text.replace("\udcff", "\ufffd") and got["total_lines"] == 40_000


def test_write_replaces_atomically_and_keeps_the_mode(sandbox: Sandbox, session: str) -> None:
    sandbox.run(f"mkdir -p {session} && printf old > {session}/run.sh && chmod 755 {session}/run.sh")
    sandbox.call("fs.write", {"path": f"{session}/run.sh", "content": "echo new\n"})
    result = sandbox.run(f"stat -c %a {session}/run.sh; ./{session}/run.sh; ls -a {session}")
    assert result["output"] == "755\nnew\n.\n..\nrun.sh\n"  # no temp file left behind


def test_binary_write_and_download_round_trip(sandbox: Sandbox, session: str, tmp_path: Path) -> None:
    blob = os.urandom(3 * 1024 * 1024 + 17)  # several chunks each way
    sandbox.call("fs.write", {"path": f"{session}/blob.bin", "data": base64.b64encode(blob).decode()})
    local = sandbox.download(f"{session}/blob.bin", tmp_path)
    assert local.read_bytes() == blob
    assert _error(sandbox, "fs.read", path=f"{session}/blob.bin").code == protocol.BINARY_FILE


def test_upload_directory_and_download_it_back(sandbox: Sandbox, session: str, tmp_path: Path) -> None:
    src = tmp_path / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("print('hi')\n")
    (src / "big.bin").write_bytes(os.urandom(2_500_000))
    result = sandbox.upload(src, session)
    assert result["files"] == 4  # proj, pkg, mod.py, big.bin
    assert sandbox.run(f"python3 {session}/proj/pkg/mod.py")["output"] == "hi\n"
    back = sandbox.download(f"{session}/proj", tmp_path / "back")
    assert (back / "big.bin").read_bytes() == (src / "big.bin").read_bytes()


def test_patch_replaces_unique_text_and_refuses_absent_or_ambiguous(sandbox: Sandbox, session: str) -> None:
    path = f"{session}/p.py"
    sandbox.call("fs.write", {"path": path, "content": "a = 1\nb = 1\nc = 2\n"})
    done = sandbox.call("fs.patch", {"path": path, "old": "c = 2", "new": "c = 3"})
    assert done["replacements"] == 1 and "+c = 3" in done["diff"]
    absent = _error(sandbox, "fs.patch", path=path, old="d = 4", new="x")
    assert absent.code == protocol.PATCH_NO_MATCH
    ambiguous = _error(sandbox, "fs.patch", path=path, old="= 1", new="= 9")
    assert ambiguous.code == protocol.PATCH_AMBIGUOUS and ambiguous.data["lines"] == [1, 2]
    sandbox.call("fs.patch", {"path": path, "old": "= 1", "new": "= 9", "replace_all": True})
    assert sandbox.call("fs.read", {"path": path, "numbered": False})["content"] == "a = 9\nb = 9\nc = 3"


def test_list_and_stat(sandbox: Sandbox, session: str) -> None:
    sandbox.run(f"mkdir -p {session}/d/e && touch {session}/d/f.txt {session}/d/.hidden {session}/d/e/g")
    listed = sandbox.call("fs.list", {"path": f"{session}/d"})
    assert [(e["name"], e["type"]) for e in listed["entries"]] == [("e", "dir"), ("f.txt", "file")]
    deep = sandbox.call("fs.list", {"path": f"{session}/d", "depth": 2, "hidden": True})
    assert {e["name"] for e in deep["entries"]} == {"e", "f.txt", ".hidden", "e/g"}
    assert sandbox.call("fs.stat", {"path": f"{session}/d/f.txt"})["type"] == "file"
    assert sandbox.call("fs.stat", {"path": f"{session}/nope"}) == {
        "path": f"{sandbox.spec.workdir}/{session}/nope",
        "exists": False,
    }


def test_search_finds_matches_with_line_numbers(sandbox: Sandbox, session: str) -> None:
    sandbox.call("fs.write", {"path": f"{session}/s/one.py", "content": "def alpha():\n    return 1\n"})
    sandbox.call("fs.write", {"path": f"{session}/s/two.txt", "content": "alpha beta\n"})
    found = sandbox.call("fs.search", {"pattern": "alpha", "path": f"{session}/s"})
    assert sorted((Path(m["path"]).name, m["line"]) for m in found["matches"]) == [
        ("one.py", 1),
        ("two.txt", 1),
    ]
    only_py = sandbox.call("fs.search", {"pattern": "al.ha", "path": f"{session}/s", "glob": "*.py"})
    assert [Path(m["path"]).name for m in only_py["matches"]] == ["one.py"]
    assert _error(sandbox, "fs.search", pattern="(", path=session).code == protocol.INVALID_PARAMS


def test_paths_outside_the_allowed_roots_are_refused(sandbox: Sandbox) -> None:
    for path in ("/etc/passwd", "../../etc/hostname", "/proc/1/environ"):
        assert _error(sandbox, "fs.read", path=path).code == protocol.PATH_DENIED
    assert _error(sandbox, "fs.write", path="/etc/evil", content="x").code == protocol.PATH_DENIED
    sandbox.run("ln -sfn /etc /tmp/escape")
    assert _error(sandbox, "fs.read", path="/tmp/escape/passwd").code == protocol.PATH_DENIED


def test_missing_file_and_directory_errors_are_clear(sandbox: Sandbox, session: str) -> None:
    missing = _error(sandbox, "fs.read", path=f"{session}/none.txt")
    assert missing.code == protocol.NOT_FOUND and "does not exist" in missing.message
    sandbox.run(f"mkdir -p {session}/dir")
    assert _error(sandbox, "fs.read", path=f"{session}/dir").code == protocol.NOT_A_FILE
