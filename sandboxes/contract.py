"""The runtime's calls, declared once: each method's params and result as a `TypedDict`, and `Method`,
the names the runtime dispatches. Stdlib only and importable on the runtime's oldest Python (3.9),
so no `X | Y` and no `from __future__ import annotations` (TypedDict would lose NotRequired)."""

import sys
from typing import Any, Literal, Optional, TypedDict

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # Python 3.9 and 3.10 in a sandbox: the annotation is only documentation there

    class NotRequired:
        def __class_getitem__(cls, item: Any) -> Any:
            return item


Method = Literal[
    "sys.hello", "sys.ping", "sys.info", "sys.shutdown", "sys.stats",
    "shell.open", "shell.run", "shell.send", "shell.interrupt", "shell.close", "shell.list",
    "shell.state", "shell.restore",
    "proc.spawn", "proc.poll", "proc.log", "proc.wait", "proc.write", "proc.attach", "proc.kill",
    "proc.list",
    "fs.read", "fs.write", "fs.patch", "fs.list", "fs.stat", "fs.search", "fs.upload",
    "fs.fingerprint", "fs.download", "fs.watch", "fs.unwatch",
    "browser.navigate", "browser.snapshot", "browser.click", "browser.type", "browser.press",
    "browser.select", "browser.scroll", "browser.back", "browser.screenshot", "browser.console",
    "browser.evaluate", "browser.close",
    "term.open", "term.send", "term.resize", "term.close", "term.list",
    "script.start", "script.reply", "script.cancel",
    "kernel.run", "kernel.restart", "kernel.shutdown",
]  # fmt: skip
"""Every method the runtime dispatches; `method.name` has `MethodNameParams` and `MethodNameResult`."""


class NoParams(TypedDict):
    """The params of a method that takes none."""


# -- sys -----------------------------------------------------------------------------------


class SysHelloParams(TypedDict):
    protocol: int
    client: NotRequired[Optional[str]]
    raw: NotRequired[bool]
    """The client reads long strings as raw bytes after their line."""


class RuntimeIdentity(TypedDict):
    """Which runtime answers: its version, the hash of its code, its Python and process."""

    version: str
    code_hash: str
    python: str
    pid: int


class SysHelloResult(RuntimeIdentity):
    protocol: int
    raw: bool


SysPingParams = NoParams


class SysPingResult(TypedDict):
    pong: bool


SysInfoParams = NoParams


class SysInfoResult(RuntimeIdentity):
    uid: int
    hostname: str
    uptime: float
    workspace: str
    roots: list[str]
    sessions: list[str]
    processes: int


SysShutdownParams = NoParams


class SysShutdownResult(TypedDict):
    stopping: bool


SysStatsParams = NoParams


class SysStatsResult(TypedDict):
    """What the sandbox's processes cost, summed by the runtime (sandboxes/usage.py)."""

    cpu_seconds: float
    memory_bytes: int
    pids: int
    disk_bytes: int
    disk_partial: bool
    uptime: float


# -- shell sessions ------------------------------------------------------------------------


class ShellOpenParams(TypedDict):
    session: NotRequired[str]
    cwd: NotRequired[Optional[str]]
    env: NotRequired[Optional[dict[str, str]]]


class ShellOpenResult(TypedDict):
    session: str
    pid: int
    cwd: str


class ShellRunOptions(TypedDict):
    """shell.run's params beyond the command, its session, timeout and streaming (`Sandbox.run`'s options)."""

    stdin: NotRequired[Optional[str]]
    interactive: NotRequired[bool]
    expect: NotRequired[Optional[str]]
    idle: NotRequired[float]
    limit: NotRequired[int]


class ShellRunParams(ShellRunOptions):
    command: str
    session: NotRequired[str]
    timeout: NotRequired[float]
    stream: NotRequired[bool]
    """Send the output as `shell.output` notifications while it runs."""


class ShellEnded(TypedDict):
    """What a command's outcome says once it has ended (not `running`)."""

    session_ended: NotRequired[bool]
    exit_code: NotRequired[int]
    cwd: NotRequired[str]
    duration_ms: NotRequired[float]
    background_output: NotRequired[str]


class ShellRunResult(ShellEnded):
    """A command's outcome."""

    output: str
    truncated: bool
    timed_out: bool
    running: bool
    session_reset: bool


class ShellSendParams(TypedDict):
    text: str
    session: NotRequired[str]
    timeout: NotRequired[float]
    expect: NotRequired[Optional[str]]
    idle: NotRequired[float]
    limit: NotRequired[int]
    stream: NotRequired[bool]


ShellSendResult = ShellRunResult


class ShellInterruptParams(TypedDict):
    session: NotRequired[str]


class ShellInterruptResult(ShellEnded):
    """`signalled`; with the command's outcome (as shell.run's) unless another request waits on it."""

    signalled: bool
    output: NotRequired[str]
    truncated: NotRequired[bool]
    timed_out: NotRequired[bool]
    running: NotRequired[bool]
    session_reset: NotRequired[bool]


class ShellCloseParams(TypedDict):
    session: str


class ShellCloseResult(TypedDict):
    closed: bool


ShellListParams = NoParams


class ShellListResult(TypedDict):
    sessions: list[str]


ShellStateParams = NoParams


class SessionState(TypedDict):
    cwd: str
    env: dict[str, str]


class ShellStateResult(TypedDict):
    """Each idle session's cwd and exported variables; busy ones in `skipped`, with the reason."""

    workspace: str
    sessions: dict[str, SessionState]
    skipped: dict[str, str]


class ShellRestoreParams(TypedDict):
    state: ShellStateResult


class ShellRestoreResult(TypedDict):
    restored: list[str]


# -- background processes ------------------------------------------------------------------


class ProcSpawnParams(TypedDict):
    command: str
    cwd: NotRequired[Optional[str]]
    env: NotRequired[Optional[dict[str, str]]]
    log_limit: NotRequired[int]
    separate_stderr: NotRequired[bool]


class ProcStatus(TypedDict):
    id: str
    pid: int
    command: str
    running: bool
    exit_code: Optional[int]
    log_bytes: int
    started: float


ProcSpawnResult = ProcStatus


class ProcIdParams(TypedDict):
    id: str


ProcPollParams = ProcIdParams
ProcPollResult = ProcStatus


class ProcLogParams(TypedDict):
    id: str
    offset: NotRequired[Optional[int]]
    tail: NotRequired[Optional[int]]


class ProcLogResult(TypedDict):
    text: str
    offset: int
    dropped_bytes: int
    running: bool
    exit_code: Optional[int]


class ProcWaitParams(TypedDict):
    id: str
    timeout: NotRequired[float]


ProcWaitResult = ProcStatus


class ProcWriteParams(TypedDict):
    id: str
    data: NotRequired[str]
    eof: NotRequired[bool]


class ProcWriteResult(TypedDict):
    written: int


class ProcAttachParams(TypedDict):
    id: str
    offset: NotRequired[int]


class ProcAttachResult(ProcStatus):
    """The status once the process has exited; its stdout came as `proc.output` notifications."""

    stderr: str


class ProcKillParams(TypedDict):
    id: str
    signal: NotRequired[str]
    wait: NotRequired[float]


ProcKillResult = ProcStatus
ProcListParams = NoParams


class ProcListResult(TypedDict):
    processes: list[ProcStatus]


# -- files ---------------------------------------------------------------------------------


class FsReadParams(TypedDict):
    path: str
    offset: NotRequired[int]
    limit: NotRequired[int]
    numbered: NotRequired[bool]


class FsReadResult(TypedDict):
    path: str
    content: str
    start: int
    end: int
    total_lines: int
    more: bool


class FsWriteParams(TypedDict):
    """Exactly one of `content` (text) or `data` (base64)."""

    path: str
    content: NotRequired[Optional[str]]
    data: NotRequired[Optional[str]]
    mode: NotRequired[Optional[int]]


class FsWriteResult(TypedDict):
    path: str
    bytes: int


class FsPatchParams(TypedDict):
    path: str
    old: str
    new: str
    replace_all: NotRequired[bool]


class FsPatchResult(TypedDict):
    path: str
    replacements: int
    diff: str


class FsListParams(TypedDict):
    path: NotRequired[str]
    depth: NotRequired[int]
    hidden: NotRequired[bool]
    limit: NotRequired[int]


class FsEntry(TypedDict):
    """A file as fs.list and fs.stat describe it; only name and type when it cannot be read."""

    name: str
    type: str
    """file, dir, symlink, other or unknown"""
    size: NotRequired[int]
    mode: NotRequired[str]
    mtime: NotRequired[float]
    uid: NotRequired[int]
    gid: NotRequired[int]
    target: NotRequired[str]


class FsListResult(TypedDict):
    path: str
    entries: list[FsEntry]
    truncated: bool


class FsStatParams(TypedDict):
    path: str


class FsStatResult(TypedDict):
    """`exists` and the full `path`; when it exists, its FsEntry fields too."""

    path: str
    exists: bool
    name: NotRequired[str]
    type: NotRequired[str]
    size: NotRequired[int]
    mode: NotRequired[str]
    mtime: NotRequired[float]
    uid: NotRequired[int]
    gid: NotRequired[int]
    target: NotRequired[str]


class FsSearchParams(TypedDict):
    pattern: str
    path: NotRequired[str]
    glob: NotRequired[Optional[str]]
    literal: NotRequired[bool]
    ignore_case: NotRequired[bool]
    limit: NotRequired[int]


class FsMatch(TypedDict):
    path: str
    line: int
    text: str


class FsSearchResult(TypedDict):
    matches: list[FsMatch]
    truncated: bool
    engine: str


class FsUploadParams(TypedDict):
    """One chunk of a tar (base64); the `final` one unpacks it under `dest`."""

    transfer: str
    dest: str
    data: str
    final: bool


class FsUploadResult(TypedDict):
    """`received` bytes so far; after the final chunk, what was unpacked."""

    received: NotRequired[int]
    path: NotRequired[str]
    bytes: NotRequired[int]
    files: NotRequired[int]
    skipped: NotRequired[int]
    """Members not unpacked (links out of the tree, devices)."""


FsFingerprintParams = NoParams


class FsFingerprintResult(TypedDict):
    fingerprint: str
    entries: int


class FsDownloadParams(TypedDict):
    path: str


class FsDownloadResult(TypedDict):
    """The tar itself came as `fs.chunk` notifications (base64 `data`)."""

    bytes: int
    chunks: int


class FsWatchParams(TypedDict):
    id: str
    path: str
    recursive: NotRequired[bool]
    debounce: NotRequired[float]
    limit: NotRequired[int]


class FsWatchResult(TypedDict):
    """When the watch ended, and why; its events came as `fs.events` notifications."""

    watch: str
    ended: str


class FsUnwatchParams(TypedDict):
    id: str


class FsUnwatchResult(TypedDict):
    stopped: bool
