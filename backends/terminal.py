"""Interactive terminals in a sandbox, rendered: the runtime's `term.*` output bytes are fed to a VT
emulator (pyte) on this side, so a caller reads the screen a person would see, not escape codes."""

from __future__ import annotations

import base64
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import pyte

from sandboxes.contract_tools import TermOpenParams, TermRead, TermSendParams, TermStatus
from sandboxes.protocol import NO_SUCH_PROCESS

from .errors import RuntimeCallError
from .runtime_client import Runtime

DEFAULT_SETTLE = 0.05
"""Seconds of quiet output after which a screen counts as settled (the runtime's default too)."""
CALL_MARGIN = 10.0
_DECCKM = 1 << 5  # pyte keeps private modes shifted by 5: ?1 is application cursor keys
_CSI_KEYS = {"up": "A", "down": "B", "right": "C", "left": "D", "home": "H", "end": "F"}
KEYS = {
    "enter": "\r",
    "return": "\r",
    "tab": "\t",
    "backtab": "\x1b[Z",
    "esc": "\x1b",
    "escape": "\x1b",
    "backspace": "\x7f",
    "space": " ",
    "delete": "\x1b[3~",
    "insert": "\x1b[2~",
    "pageup": "\x1b[5~",
    "pagedown": "\x1b[6~",
    **{f"f{n}": f"\x1bO{c}" for n, c in zip(range(1, 5), "PQRS", strict=True)},
    **{f"f{n}": f"\x1b[{c}~" for n, c in zip(range(5, 13), (15, 17, 18, 19, 20, 21, 23, 24), strict=True)},
}
_CTRL = re.compile(r"^(?:ctrl|c|control)[-+]([a-z@\[\\\]^_ ])$")
KEY_NAMES = "Enter, Tab, BackTab, Esc, Backspace, Space, Delete, Insert, Up, Down, Left, Right, Home, End, \
PageUp, PageDown, F1-F12, Ctrl-A..Ctrl-Z (also Ctrl-[ Ctrl-\\ Ctrl-] Ctrl-^ Ctrl-_ Ctrl-@)"


_TERMINAL_ID = re.compile(r"^t[0-9]+$")


def is_terminal_id(name: str) -> bool:
    """Whether an id names an interactive terminal (t1, t2, ...), not a background process (p1, ...)."""
    return bool(_TERMINAL_ID.match(name))


class Caller(Protocol):
    """What a terminal needs of its sandbox (backends.base.Sandbox)."""

    @property
    def runtime(self) -> Runtime: ...


def key_sequence(name: str, application_cursor: bool = False) -> str | None:
    """The bytes a terminal sends for a named key (Enter, Ctrl-C, Up, F5...), or None for no such name."""
    key = name.strip().lower()
    if key in _CSI_KEYS:
        return ("\x1bO" if application_cursor else "\x1b[") + _CSI_KEYS[key]
    if key in KEYS:
        return KEYS[key]
    match = _CTRL.match(key)
    if match:
        return chr(ord(match.group(1).upper()) & 0x1F)
    return None


@dataclass(frozen=True)
class Screen:
    """A terminal's screen as rendered: its lines (trailing blanks cut), the cursor, the program's state."""

    id: str
    lines: list[str]
    cursor: tuple[int, int]
    """(row, column), both from 0."""
    rows: int
    cols: int
    running: bool
    exit_code: int | None
    dropped_bytes: int = 0

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def render(self) -> str:
        """The screen for a model to read, with a header saying where it stands."""
        state = "running" if self.running else f"exited with code {self.exit_code}"
        head = (
            f"[terminal {self.id} · {self.rows}x{self.cols} · {state} · "
            f"cursor row {self.cursor[0] + 1}, col {self.cursor[1] + 1}]"
        )
        if self.dropped_bytes:
            head += f"\n[{self.dropped_bytes} bytes of early output were not kept; the screen may be partial]"
        return head + "\n" + self.text


class _Screen(pyte.Screen):  # type: ignore[misc]
    """pyte's screen, keeping what the program asked the terminal to answer (cursor position reports)."""

    def __init__(self, columns: int, lines: int) -> None:
        super().__init__(columns, lines)
        self.replies: list[str] = []

    def write_process_input(self, data: str) -> None:
        self.replies.append(data)


class Terminal:
    """One interactive terminal: a program on a PTY in the sandbox, and its screen here."""

    def __init__(self, sandbox: Caller, tid: str, rows: int, cols: int) -> None:
        self.sandbox = sandbox
        self.id = tid
        self._screen = _Screen(cols, rows)
        self._stream = pyte.ByteStream(self._screen)
        self._offset = 0
        self._last: TermRead | None = None
        """The runtime's last answer (the program's state as last seen)."""
        self._lock = threading.Lock()

    def send(
        self,
        keys: Iterable[str] = (),
        text: str = "",
        settle: float = DEFAULT_SETTLE,
        timeout: float = 10.0,
        expect: str | None = None,
    ) -> Screen:
        """Type `text`, then each of `keys` (a key name, or literal text when it names no key), and
        return the screen once output settles. Raises RuntimeCallError (the terminal ended or is gone)."""
        with self._lock:
            application = _DECCKM in self._screen.mode
            typed = text + "".join(key_sequence(k, application) or k for k in keys)
            return self._read(typed, settle, timeout, expect, until_exit=False)

    def screen(self, settle: float = DEFAULT_SETTLE, timeout: float = 0.0) -> Screen:
        """The screen now (with `timeout`: once new output settles)."""
        with self._lock:
            return self._read("", settle, timeout, None, until_exit=False)

    def wait(self, timeout: float) -> Screen:
        """The screen once the program exits, or after `timeout` seconds."""
        with self._lock:
            return self._read("", DEFAULT_SETTLE, timeout, None, until_exit=True)

    def resize(self, rows: int, cols: int, settle: float = DEFAULT_SETTLE) -> Screen:
        """A new window size (the program gets SIGWINCH and usually redraws); the screen after."""
        with self._lock:
            self.sandbox.runtime.term_resize(id=self.id, rows=rows, cols=cols)
            self._screen.resize(rows, cols)
            return self._read("", settle, 1.0, None, until_exit=False)

    def close(self) -> TermStatus:
        """Kill the program and everything it started; its status."""
        return self.sandbox.runtime.term_close(id=self.id)

    def _read(self, data: str, settle: float, timeout: float, expect: str | None, until_exit: bool) -> Screen:
        """Type `data`, read until the output settles; with `expect` (a regex, multi-line, matched against
        `Screen.text`, whose lines have no trailing blanks), read on (each read blocks until there is
        more output) until the screen matches, the program ends or `timeout` passes."""
        pattern = re.compile(expect, re.MULTILINE) if expect else None
        deadline = time.monotonic() + timeout
        if not data and pattern is not None and self._last is not None:
            screen = self._snapshot(self._last)
            if pattern.search(screen.text):  # nothing typed and already there: no new output to wait for
                return screen
        while True:
            params: TermSendParams = {
                "id": self.id,
                "data": data,
                "offset": self._offset,
                "settle": settle,
                "timeout": timeout,
            }
            if until_exit:
                params["until_exit"] = True
            result = self._take(self.sandbox.runtime.term_send(**params, call_timeout=timeout + CALL_MARGIN))
            data = "".join(self._screen.replies)  # answers to the program's queries (cursor position)
            self._screen.replies.clear()
            screen = self._snapshot(result)
            timeout = deadline - time.monotonic()
            if data and screen.running:
                timeout = max(timeout, 0.0)
                continue
            if pattern is None or pattern.search(screen.text) or not screen.running or timeout <= 0:
                return screen

    def _take(self, result: TermRead) -> TermRead:
        self._stream.feed(base64.b64decode(result["data"]))
        self._offset = int(result["offset"])
        self._last = result
        return result

    def _snapshot(self, result: TermRead) -> Screen:
        lines = [line.rstrip() for line in self._screen.display]
        while lines and not lines[-1]:
            lines.pop()
        return Screen(
            id=self.id,
            lines=lines,
            cursor=(self._screen.cursor.y, self._screen.cursor.x),
            rows=self._screen.lines,
            cols=self._screen.columns,
            running=bool(result["running"]),
            exit_code=result["exit_code"],
            dropped_bytes=int(result.get("dropped_bytes", 0)),
        )


class Terminals:
    """A sandbox's interactive terminals (`Sandbox.terminals`), by the runtime's ids (t1, t2, ...)."""

    def __init__(self, sandbox: Caller) -> None:
        self.sandbox = sandbox
        self._open: dict[str, Terminal] = {}
        self._lock = threading.Lock()

    def open(
        self,
        command: str,
        rows: int = 24,
        cols: int = 80,
        settle: float = DEFAULT_SETTLE,
        timeout: float = 10.0,
        expect: str | None = None,
    ) -> tuple[Terminal, Screen]:
        """Start `command` (bash -c) on a new PTY; the terminal and its first settled screen."""
        params: TermOpenParams = {
            "command": command,
            "rows": rows,
            "cols": cols,
            "settle": settle,
            "timeout": timeout,
        }
        started = time.monotonic()
        result = self.sandbox.runtime.term_open(**params, call_timeout=timeout + CALL_MARGIN)
        term = Terminal(self.sandbox, result["id"], rows, cols)
        with self._lock:
            self._open[term.id] = term
        screen = term._snapshot(term._take(result))
        if expect is not None and not re.search(expect, screen.text, re.MULTILINE) and screen.running:
            with term._lock:
                screen = term._read("", settle, timeout - (time.monotonic() - started), expect, False)
        return term, screen

    def get(self, tid: str) -> Terminal:
        """A terminal by id; one opened by another process is rebuilt from the output the runtime kept.
        Raises RuntimeCallError (NO_SUCH_PROCESS) when the sandbox has no such terminal."""
        with self._lock:
            term = self._open.get(tid)
        if term is not None:
            return term
        known = {t["id"]: t for t in self.list()}
        if tid not in known:
            raise RuntimeCallError(NO_SUCH_PROCESS, f"no terminal {tid!r}", method="term.send")
        term = Terminal(self.sandbox, tid, int(known[tid]["rows"]), int(known[tid]["cols"]))
        with self._lock:
            return self._open.setdefault(tid, term)

    def list(self) -> list[TermStatus]:
        return self.sandbox.runtime.term_list()["terminals"]

    def close(self, tid: str) -> TermStatus:
        with self._lock:
            term = self._open.pop(tid, None)
        return (term or Terminal(self.sandbox, tid, 1, 1)).close()
