"""Each family of runtime calls made through the typed client (Sandbox.runtime) on a real sandbox, and
every answer has the keys its declared result shape says: required ones present, none undeclared. The
browser and the python kernel are driven through the client by tests/tools (test_browser.py,
test_python_tool.py); the handshake by every channel."""

from __future__ import annotations

import base64
import typing
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import get_backend

from backends import RuntimeCallError, Sandbox, SandboxSpec
from sandboxes import contract as c
from sandboxes import contract_tools as t
from sandboxes.protocol import NO_SUCH_PROCESS


@pytest.fixture(scope="module", params=["local", "docker"])
def sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    with get_backend(request.param).create(SandboxSpec(memory="512m", pids=256)) as sb:
        yield sb


def conforms(result: Mapping[str, Any], shape: Any) -> Mapping[str, Any]:
    """`result`, after checking its keys against `shape` (a TypedDict, or a Union of them)."""
    options = typing.get_args(shape) or (shape,)
    problems = []
    for option in options:
        missing = option.__required_keys__ - result.keys()
        extra = result.keys() - option.__required_keys__ - option.__optional_keys__
        if not missing and not extra:
            return result
        problems.append(f"{option.__name__}: missing {sorted(missing)}, undeclared {sorted(extra)}")
    raise AssertionError(f"{dict(result)!r} is not {shape}: " + "; ".join(problems))


def test_sys(sandbox: Sandbox) -> None:
    runtime = sandbox.runtime
    assert conforms(runtime.sys_ping(), c.SysPingResult)["pong"] is True
    info = conforms(runtime.sys_info(), c.SysInfoResult)
    assert info["workspace"] and info["pid"] > 0
    assert conforms(runtime.sys_stats(), c.SysStatsResult)["pids"] >= 1


def test_shell(sandbox: Sandbox) -> None:
    runtime, session = sandbox.runtime, "contract-" + uuid.uuid4().hex[:6]
    opened = conforms(runtime.shell_open(session=session), c.ShellOpenResult)
    assert opened["session"] == session
    ran = conforms(
        runtime.shell_run(command="cd /tmp && export MARK=42 && echo hi", session=session), c.ShellRunResult
    )
    assert (ran["output"].strip(), ran["exit_code"], ran["cwd"]) == ("hi", 0, "/tmp")
    asking = runtime.shell_run(
        command="python3 -q", session=session, interactive=True, expect=">>> ", timeout=20
    )
    assert conforms(asking, c.ShellRunResult)["running"] is True
    answered = runtime.shell_send(text="print(6 * 7)\n", session=session, expect=">>> ")
    assert "42" in conforms(answered, c.ShellSendResult)["output"]
    assert runtime.shell_send(text="exit()\n", session=session, timeout=20)["running"] is False
    idle = conforms(runtime.shell_interrupt(session=session), c.ShellInterruptResult)
    assert idle["signalled"] is False, "nothing was running"
    assert session in conforms(runtime.shell_list(), c.ShellListResult)["sessions"]
    state = conforms(runtime.shell_state(), c.ShellStateResult)
    assert state["sessions"][session]["env"]["MARK"] == "42"
    assert conforms(runtime.shell_close(session=session), c.ShellCloseResult)["closed"] is True
    restored = conforms(runtime.shell_restore(state=state), c.ShellRestoreResult)
    assert session in restored["restored"]
    again = runtime.shell_run(command="echo $MARK; pwd", session=session)
    assert again["output"].split() == ["42", "/tmp"]
    runtime.shell_close(session=session)


def test_proc(sandbox: Sandbox) -> None:
    runtime = sandbox.runtime
    cat = conforms(runtime.proc_spawn(command="cat"), c.ProcSpawnResult)
    assert (
        conforms(runtime.proc_write(id=cat["id"], data="hello\n", eof=True), c.ProcWriteResult)["written"]
        == 6
    )
    assert conforms(runtime.proc_wait(id=cat["id"], timeout=30), c.ProcWaitResult)["exit_code"] == 0
    assert conforms(runtime.proc_log(id=cat["id"]), c.ProcLogResult)["text"].strip() == "hello"
    assert conforms(runtime.proc_poll(id=cat["id"]), c.ProcPollResult)["running"] is False
    streamed: list[bytes] = []
    attached = runtime.proc_attach(
        id=cat["id"], on_notify=lambda method, p: streamed.append(base64.b64decode(p["data"]))
    )
    assert conforms(attached, c.ProcAttachResult)["exit_code"] == 0 and b"".join(streamed) == b"hello\n"
    sleeper = runtime.proc_spawn(command="sleep 300")
    listed = conforms(runtime.proc_list(), c.ProcListResult)["processes"]
    assert {cat["id"], sleeper["id"]} <= {p["id"] for p in listed} and all(
        conforms(p, c.ProcStatus) for p in listed
    )
    killed = conforms(runtime.proc_kill(id=sleeper["id"], signal="KILL"), c.ProcKillResult)
    assert killed["running"] is False
    with pytest.raises(RuntimeCallError) as refused:
        runtime.proc_poll(id="p-none")
    assert refused.value.code == NO_SUCH_PROCESS


def test_fs(sandbox: Sandbox, tmp_path: Path) -> None:
    runtime, where = sandbox.runtime, "contract-" + uuid.uuid4().hex[:6]
    written = conforms(runtime.fs_write(path=f"{where}/a.txt", content="one\ntwo\n"), c.FsWriteResult)
    assert written["bytes"] == 8
    conforms(
        runtime.fs_write(path=f"{where}/b.bin", data=base64.b64encode(b"\0\1").decode()), c.FsWriteResult
    )
    patched = conforms(runtime.fs_patch(path=f"{where}/a.txt", old="two", new="2"), c.FsPatchResult)
    assert patched["replacements"] == 1
    page = conforms(runtime.fs_read(path=f"{where}/a.txt", numbered=False), c.FsReadResult)
    assert page["content"] == "one\n2"
    listing = conforms(runtime.fs_list(path=where), c.FsListResult)
    assert sorted(conforms(e, c.FsEntry)["name"] for e in listing["entries"]) == ["a.txt", "b.bin"]
    assert conforms(runtime.fs_stat(path=f"{where}/b.bin"), c.FsStatResult)["size"] == 2
    assert conforms(runtime.fs_stat(path=f"{where}/none"), c.FsStatResult)["exists"] is False
    found = conforms(runtime.fs_search(pattern="one", path=where), c.FsSearchResult)
    assert [conforms(m, c.FsMatch)["line"] for m in found["matches"]] == [1]
    assert conforms(runtime.fs_fingerprint(), c.FsFingerprintResult)["entries"] >= 2
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "c.txt").write_text("three")
    uploaded = conforms(sandbox.upload(tmp_path / "up", where), c.FsUploadResult)
    assert uploaded["files"] >= 1
    back = sandbox.download(f"{where}/up", tmp_path / "back")
    assert (back / "c.txt").read_text() == "three"
    with sandbox.watch(where) as watch:
        runtime.fs_write(path=f"{where}/d.txt", content="four")
        event = watch.get(timeout=30)
        while event is not None and not event.path.endswith("/d.txt"):
            event = watch.get(timeout=30)
    assert event is not None, "the write was seen"


def test_term(sandbox: Sandbox) -> None:
    runtime = sandbox.runtime
    opened = conforms(runtime.term_open(command="cat", rows=10, cols=40), t.TermOpenResult)
    echoed = conforms(runtime.term_send(id=opened["id"], data="ping\r", timeout=10), t.TermSendResult)
    assert echoed["running"] is True and echoed["offset"] > 0
    assert conforms(runtime.term_resize(id=opened["id"], rows=20, cols=60), t.TermResizeResult)["rows"] == 20
    listed = conforms(runtime.term_list(), t.TermListResult)["terminals"]
    assert opened["id"] in [conforms(term, t.TermStatus)["id"] for term in listed]
    assert conforms(runtime.term_close(id=opened["id"]), t.TermCloseResult)["running"] is False


def test_script(sandbox: Sandbox) -> None:
    runtime = sandbox.runtime
    code = "from hermetic_tools import echo\nprint('got', echo('hi'))\n"
    event = conforms(runtime.script_start(script=code, tools={"echo": ["text"]}), t.ScriptStartResult)
    assert event["event"] == "call" and event["name"] == "echo" and event["arguments"] == {"text": "hi"}
    done = runtime.script_reply(run=event["run"], result={"ok": True, "content": "back"})
    assert conforms(done, t.ScriptReplyResult)["event"] == "done"
    assert done["event"] == "done" and done["output"].strip() == "got back" and done["exit_code"] == 0
    assert conforms(runtime.script_cancel(run=event["run"]), t.ScriptCancelResult)["cancelled"] == 0
