"""A throwaway ngIRCd (Debian's `ngircd`) on 127.0.0.1 with its own config, for the IRC tests and
benchmark; and a plain-socket IRC user to talk to the bot through it, as a person's client would."""

from __future__ import annotations

import contextlib
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

NGIRCD = "/usr/sbin/ngircd"
PASSWORD = "server-secret"
OPERATOR = "op"
"""An IRC operator (`OPER op server-secret`), who can KILL a connection."""
T = TypeVar("T")
REPLY_TIMEOUT = 120.0
"""Seconds a wait on the bot may take before the test fails: the session's first turn pays the agent's
cold imports, which on the shared machine under load have taken most of a minute."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Ngircd:
    """ngIRCd in the foreground (-n) with a config of its own: a server password, no DNS/ident/PAM."""

    def __init__(self) -> None:
        if shutil.which(NGIRCD) is None:
            pytest.skip("ngircd is not installed (setup.sh installs it: apt-get install ngircd)")
        self.dir = Path(tempfile.mkdtemp(prefix="hermetic-ngircd-"))
        self.port = free_port()
        (self.dir / "motd").write_text("test server\n")
        (self.dir / "ngircd.conf").write_text(
            f"[Global]\nName = irc.test\nInfo = hermetic test\nListen = 127.0.0.1\nPorts = {self.port}\n"
            f"Password = {PASSWORD}\nMotdFile = {self.dir / 'motd'}\nPidFile = {self.dir / 'pid'}\n"
            "[Limits]\nMaxConnectionsIP = 0\nMaxNickLength = 30\nPingTimeout = 120\n"
            "[Options]\nDNS = no\nIdent = no\nPAM = no\n"
            f"[Operator]\nName = {OPERATOR}\nPassword = {PASSWORD}\n"
        )
        self.proc = subprocess.Popen(
            [NGIRCD, "-n", "-f", str(self.dir / "ngircd.conf")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        until_listening(self.proc, self.port, "ngircd", self.close)

    def close(self) -> None:
        stop(self.proc, self.dir)


def until_listening(proc: subprocess.Popen[str], port: int, name: str, close: Callable[[], None]) -> None:
    """Return once a server just started accepts on 127.0.0.1:`port`; if it exits or takes too long,
    `close` it and raise with what it said on stderr."""
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                close()
                raise RuntimeError(  # noqa: B904 (the server's stderr says why, not the probe)
                    f"{name} did not start: {proc.stderr and proc.stderr.read()}"
                )
            time.sleep(0.05)


def stop(proc: subprocess.Popen[str], directory: Path) -> None:
    """End a server `until_listening` saw start, and remove its directory."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def irc_server() -> Iterator[Ngircd]:
    server = Ngircd()
    yield server
    server.close()


class IrcUser:
    """A person on the server: registers a nick, joins channels, says things and hears PRIVMSGs."""

    def __init__(self, server: Ngircd, nick: str) -> None:
        self.nick = nick
        self.sock = socket.create_connection(("127.0.0.1", server.port), 10)
        # reads block: with the connect timeout left on, the reader ended at the first 10 s of quiet (a
        # slow turn) and nothing said after it was heard
        self.sock.settimeout(None)
        self.heard: queue.Queue[tuple[str, str, str]] = queue.Queue()
        """(from nick, target, text) of every PRIVMSG this user receives."""
        self.lines: list[str] = []
        self._welcome = threading.Event()
        self.joins: set[tuple[str, str]] = set()
        """(nick, channel) of every JOIN this user saw: its own and others' in its channels."""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.send(f"PASS {PASSWORD}", f"NICK {nick}", f"USER {nick} 0 * :{nick}")
        assert self._welcome.wait(10), f"{nick} was not welcomed: {self.lines}"

    def send(self, *lines: str) -> None:
        self.sock.sendall("".join(line + "\r\n" for line in lines).encode())

    def join(self, channel: str) -> None:
        self.send(f"JOIN {channel}")
        wait_for(lambda: (self.nick, channel) in self.joins)

    def say(self, target: str, text: str) -> None:
        self.send(f"PRIVMSG {target} :{text}")

    def hear(self, count: int, timeout: float = REPLY_TIMEOUT) -> list[tuple[str, str, str]]:
        """The next `count` PRIVMSGs, in the order they came."""
        return [self.heard.get(timeout=timeout) for _ in range(count)]

    def hear_until(self, words: str, timeout: float = REPLY_TIMEOUT) -> list[str]:
        """The texts heard up to and with the first one holding `words`."""
        texts: list[str] = []
        while not texts or words not in texts[-1]:
            texts.append(self.heard.get(timeout=timeout)[2])
        return texts

    def wait_online(self, nick: str, timeout: float = REPLY_TIMEOUT) -> None:
        """Until `nick` is on the server (asked with ISON, the way clients watch for a friend)."""

        def online() -> bool:
            asked = len(self.lines)  # only answers to this ISON: an earlier one said who was on then
            self.send(f"ISON {nick}")
            time.sleep(0.2)
            return any(f" 303 {self.nick} :{nick}" in line for line in self.lines[asked:])

        wait_for(online, timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.send("QUIT :bye")
        self.sock.close()

    def _read(self) -> None:
        buffer = b""
        while chunk := _recv(self.sock):
            buffer += chunk
            *lines, buffer = buffer.split(b"\r\n")
            for raw in lines:
                self._handle(raw.decode("utf-8", "replace"))

    def _handle(self, line: str) -> None:
        self.lines.append(line)
        prefix, _, rest = line.partition(" ") if line.startswith(":") else ("", "", line)
        command, _, params = rest.partition(" ")
        if command == "PING":
            self.send(f"PONG {params}")
        elif command == "001":
            self._welcome.set()
        elif command == "JOIN":
            self.joins.add((prefix[1:].split("!")[0], params.lstrip(":")))
        elif command == "PRIVMSG":
            target, _, text = params.partition(" ")
            self.heard.put((prefix[1:].split("!")[0], target, text.removeprefix(":")))


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def wait_for(check: Callable[[], T], timeout: float = REPLY_TIMEOUT) -> T:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)
    return found


def irc_config(server: Ngircd, **extra: Any) -> dict[str, Any]:
    """The gateway's `irc:` settings for a bot on this server."""
    return {
        "host": "127.0.0.1",
        "port": server.port,
        "tls": False,
        "nick": "hermetic",
        "password": PASSWORD,
        "edit_interval": 0.05,
    } | extra
