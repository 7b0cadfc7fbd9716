"""Interactive terminals on every backend: a program on a PTY, driven by text and named keys, read back
as the rendered screen (a REPL with history, a password prompt, `top`, a resized window)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator

import pytest

from backends import Backend, Sandbox, SandboxSpec
from backends.errors import RuntimeCallError
from backends.terminal import key_sequence


@pytest.fixture(scope="module")
def sandbox(backend: Backend) -> Iterator[Sandbox]:
    with backend.create(SandboxSpec(memory="512m", pids=256)) as sb:
        yield sb


def test_a_repl_answers_keeps_its_history_and_takes_ctrl_c_and_ctrl_d(sandbox: Sandbox) -> None:
    term, screen = sandbox.terminals.open("python3 -q", expect=">>>$")
    assert screen.running and screen.lines[-1] == ">>>", screen.text
    screen = term.send(["6*7", "Enter"], expect=r"^42\n>>>$")
    assert screen.lines[-2:] == [">>> 6*7", "42"] or screen.lines[-3:] == [">>> 6*7", "42", ">>>"], (
        screen.text
    )
    screen = term.send(["Up"], expect=r"^42\n>>> 6\*7$")  # readline's history, through the arrow key
    assert screen.lines[-1] == ">>> 6*7", screen.text
    screen = term.send(["Ctrl-C"], expect="KeyboardInterrupt")
    assert "KeyboardInterrupt" in screen.text
    screen = term.send(["Ctrl-D"])
    screen = term.wait(timeout=20)
    assert not screen.running and screen.exit_code == 0


def test_a_password_prompt_takes_the_secret_without_showing_it(sandbox: Sandbox) -> None:
    term, screen = sandbox.terminals.open(
        "read -rs -p 'Password: ' pw; echo; echo \"got ${#pw} characters\"", expect="Password:"
    )
    assert screen.lines == ["Password:"] and screen.cursor == (0, len("Password: "))
    screen = term.send(["hunter22", "Enter"])
    screen = term.wait(timeout=20)
    assert screen.lines == ["Password:", "got 8 characters"], screen.text
    assert "hunter22" not in screen.text and screen.exit_code == 0


def test_a_full_screen_program_is_rendered_and_quits_on_its_key(sandbox: Sandbox) -> None:
    term, screen = sandbox.terminals.open("top -d 5", rows=20, cols=90, expect="PID")
    assert screen.lines[0].startswith("top - ") and "load average" in screen.lines[0], screen.text
    header = next(line for line in screen.lines if "PID" in line)
    assert "COMMAND" in header and "\x1b" not in screen.text  # drawn by escapes, read as a screen
    assert len(screen.lines) <= 20 and all(len(line) <= 90 for line in screen.lines)
    term.send(["q"])
    assert not term.wait(timeout=20).running


def test_a_resized_terminal_tells_the_program_its_new_size(sandbox: Sandbox) -> None:
    program = (
        "import os, signal, sys\n"
        "size = lambda *_: os.write(1, b'size %d %d\\r\\n' % os.get_terminal_size(0)[::-1])\n"
        "signal.signal(signal.SIGWINCH, size)\n"
        "print('ready', flush=True)\n"
        "for line in sys.stdin: print('said', line.strip(), flush=True)\n"
    )
    term, screen = sandbox.terminals.open(f"python3 -c {shlex.quote(program)}", expect="ready")
    screen = term.resize(30, 100)
    screen = term.send([], expect="size 30 100")
    assert "size 30 100" in screen.text and (screen.rows, screen.cols) == (30, 100)
    screen = term.send(["hello", "Enter"], expect="said hello")
    assert screen.lines[-2:] == ["hello", "said hello"]  # the terminal's echo, then the program's line
    status = term.close()
    assert status["running"] is False
    with pytest.raises(RuntimeCallError, match="no terminal"):
        sandbox.terminals.get(term.id).send(["x"])


def test_named_keys_map_to_what_a_terminal_sends() -> None:
    assert (
        key_sequence("Enter") == "\r" and key_sequence("ctrl-c") == "\x03" and key_sequence("Esc") == "\x1b"
    )
    assert key_sequence("Up") == "\x1b[A" and key_sequence("up", application_cursor=True) == "\x1bOA"
    assert key_sequence("Tab") == "\t" and key_sequence("F5") == "\x1b[15~" and key_sequence("C-d") == "\x04"
    assert key_sequence("hello") is None
