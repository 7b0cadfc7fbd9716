"""Persistent shell sessions, on every backend."""

from __future__ import annotations

import threading

import pytest

from backends import RuntimeCallError, Sandbox


def test_cwd_env_functions_and_aliases_persist(sandbox: Sandbox, session: str) -> None:
    sandbox.run(
        'mkdir -p /tmp/w && cd /tmp/w && export GREETING=hi && greet() { echo "$GREETING $1"; }'
        " && alias ll='echo aliased'",
        session=session,
    )
    result = sandbox.run("pwd; echo $GREETING; greet you; ll", session=session)
    assert result["output"] == "/tmp/w\nhi\nhi you\naliased\n"
    assert result["cwd"] == "/tmp/w"


def test_exit_code_and_final_cwd_are_returned(sandbox: Sandbox, session: str) -> None:
    result = sandbox.run("cd /tmp; (exit 7)", session=session)
    assert result["exit_code"] == 7
    assert result["cwd"] == "/tmp"


def test_cwd_with_colons_spaces_and_unicode_comes_back_whole(sandbox: Sandbox, session: str) -> None:
    """The run's end marker carries bash's $PWD after the exit status: a path with the separator in it
    must survive, and a deleted directory must not break the run."""
    odd = "/tmp/a:b c/\u00e9t\u00e9:0"
    result = sandbox.run(f"mkdir -p '{odd}' && cd '{odd}' && (exit 3)", session=session)
    assert (result["exit_code"], result["cwd"]) == (3, odd)
    gone = sandbox.run("cd /tmp && mkdir -p gone && cd gone && rmdir /tmp/gone", session=session)
    assert gone["exit_code"] == 0 and gone["cwd"] == "/tmp/gone"
    assert sandbox.run("cd /tmp && echo ok", session=session)["output"] == "ok\n"


def test_sessions_are_independent(sandbox: Sandbox, session: str) -> None:
    sandbox.run("cd /tmp; export ONLY_HERE=1", session=session)
    other = sandbox.run("pwd; echo ${ONLY_HERE:-unset}", session=session + "-b")
    assert other["output"].splitlines() == [sandbox.spec.workdir, "unset"]


def test_timeout_kills_only_the_command(sandbox: Sandbox, session: str) -> None:
    sandbox.run("export KEEP=yes; sleep 300 & echo $! > /tmp/bg-" + session, session=session)
    result = sandbox.run("sleep 100; echo never", session=session, timeout=1)
    assert result["timed_out"] and not result["session_reset"]
    assert "never" not in result["output"]
    after = sandbox.run("echo $KEEP; kill -0 $(cat /tmp/bg-%s) && echo bg-alive" % session, session=session)
    assert after["output"] == "yes\nbg-alive\n"


@pytest.mark.parametrize("loop", ["while true; do :; done", "for i in 1 2 3; do sleep 10; done"])
def test_timeout_breaks_loops_running_in_bash_itself(sandbox: Sandbox, session: str, loop: str) -> None:
    result = sandbox.run(loop, session=session, timeout=1)
    assert result["timed_out"]
    assert sandbox.run("echo alive", session=session)["output"] == "alive\n"


def test_interrupt_stops_the_running_command(sandbox: Sandbox, session: str) -> None:
    results: list[dict] = []
    started = threading.Event()

    def run() -> None:
        results.append(
            sandbox.run(
                "echo started; sleep 100", session=session, timeout=300, on_output=lambda text: started.set()
            )
        )

    worker = threading.Thread(target=run)
    worker.start()
    assert started.wait(30)
    assert sandbox.call("shell.interrupt", {"session": session}) == {"signalled": True}
    worker.join(30)
    assert results and results[0]["exit_code"] == 130 and not results[0]["timed_out"]


def test_busy_session_refuses_a_second_run(sandbox: Sandbox, session: str) -> None:
    first = sandbox.run("python3 -q", session=session, interactive=True, expect=">>> ", timeout=10)
    assert first["running"]
    with pytest.raises(RuntimeCallError) as err:
        sandbox.run("echo hi", session=session)
    assert "still running" in err.value.message
    sandbox.call("shell.send", {"session": session, "text": "exit()\n"})


def test_send_drives_a_python_repl_line_by_line(sandbox: Sandbox, session: str) -> None:
    first = sandbox.run("python3 -q", session=session, interactive=True, expect=">>> ", timeout=20)
    assert first["running"] and first["output"].endswith(">>> ")
    second = sandbox.call("shell.send", {"session": session, "text": "x = 6 * 7\n", "expect": ">>> "})
    third = sandbox.call("shell.send", {"session": session, "text": "print(x)\n", "expect": ">>> "})
    assert second["running"] and "42" in third["output"]
    done = sandbox.call("shell.send", {"session": session, "text": "exit()\n", "timeout": 20})
    assert not done["running"] and done["exit_code"] == 0
    assert sandbox.run("echo back", session=session)["output"] == "back\n"


def test_command_reading_stdin_gets_end_of_file(sandbox: Sandbox, session: str) -> None:
    result = sandbox.run("cat; read line; echo read=$?", session=session, timeout=10)
    assert not result["timed_out"] and result["output"] == "read=1\n"


def test_stdin_text_is_fed_to_the_command(sandbox: Sandbox, session: str) -> None:
    assert sandbox.run("tr a-z A-Z", session=session, stdin="hello\n")["output"] == "HELLO\n"


def test_background_child_holding_output_returns_promptly(sandbox: Sandbox, session: str) -> None:
    result = sandbox.run("(sleep 60; echo late) & echo started", session=session, timeout=20)
    assert not result["timed_out"] and result["output"].endswith("started\n")


def test_large_output_is_cut_head_and_tail_with_a_marker(sandbox: Sandbox, session: str) -> None:
    result = sandbox.run("seq 1 200000", session=session, limit=10_000)
    text = result["output"]
    assert result["truncated"] and len(text) < 11_000
    assert text.startswith("1\n2\n3\n") and text.endswith("199999\n200000\n")
    assert "output truncated: 1,288,895 bytes in all" in text


def test_output_is_streamed_as_notifications(sandbox: Sandbox, session: str) -> None:
    chunks: list[str] = []
    result = sandbox.run(
        "for i in 1 2 3; do echo $i; sleep 0.3; done", session=session, on_output=chunks.append
    )
    assert len(chunks) >= 2
    assert "".join(chunks) == result["output"] == "1\n2\n3\n"


def test_escapes_are_stripped_and_bad_bytes_replaced(sandbox: Sandbox, session: str) -> None:
    result = sandbox.run(
        r"printf '\033[31mred\033[0m \377\376 ok\r\nprogress 10%%\rprogress 100%%\n'", session=session
    )
    assert result["output"] == "red \ufffd\ufffd ok\nprogress 100%\n"


def test_syntax_error_leaves_the_session_usable(sandbox: Sandbox, session: str) -> None:
    result = sandbox.run('echo "unclosed', session=session)
    assert result["exit_code"] != 0 and "unexpected EOF" in result["output"]
    assert sandbox.run("echo fine", session=session)["output"] == "fine\n"


def test_exit_ends_the_session_and_the_next_run_starts_a_new_one(sandbox: Sandbox, session: str) -> None:
    result = sandbox.run("exit 3", session=session)
    assert result["exit_code"] == 3 and result.get("session_ended")
    after = sandbox.run("echo new", session=session)
    assert after["output"] == "new\n" and after["session_reset"]


def test_closing_a_session_kills_its_processes(sandbox: Sandbox, session: str) -> None:
    pid = sandbox.run("sleep 300 & echo $!", session=session)["output"].split()[-1]
    assert sandbox.call("shell.close", {"session": session}) == {"closed": True}
    # Not `kill -0`: a killed orphan stays a zombie until the host's init reaps it (some inits never do).
    running = f"awk '/^State:/ {{ exit $2 == \"Z\" }}' /proc/{pid}/status 2>/dev/null"
    check = sandbox.run(f"{running} && echo alive || echo gone", session=session + "-b")
    assert check["output"] == "gone\n"


def test_output_of_background_jobs_between_runs_is_reported_apart(sandbox: Sandbox, session: str) -> None:
    sandbox.run("(sleep 0.5; echo from-the-background) &", session=session)
    sandbox.run("sleep 1.5", session=session)  # the job writes during this run
    sandbox.run("(sleep 0.3; echo late) & disown", session=session)
    later = sandbox.run("sleep 1; echo mine", session=session + "-b")  # another session: no effect
    assert later["output"] == "mine\n"
    result = sandbox.run("echo now", session=session)
    assert result["output"] == "now\n"
    assert "late" in result["background_output"]
