"""A throwaway Prosody (Debian's `prosody`) on 127.0.0.1 with its own config and data, users registered
with prosodyctl, for the XMPP tests and benchmark; and a person on it as a slixmpp client in a thread
of its own, as a person's client would talk to the bot."""

from __future__ import annotations

import asyncio
import io
import os
import pwd
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import slixmpp
import slixmpp.exceptions
from ngircd import REPLY_TIMEOUT, free_port, stop, until_listening

PROSODY = "/usr/bin/prosody"
DOMAIN = "xmpp.test"
ROOMS = f"rooms.{DOMAIN}"
UPLOADS = f"upload.{DOMAIN}"
UPLOAD_LIMIT = 1_000_000
"""Bytes one HTTP upload may hold (http_file_share_size_limit)."""
PASSWORD = "xmpp-secret"


class Prosody:
    """Prosody in the foreground (-F): c2s on one loopback port, no s2s, plain authentication allowed
    (loopback only), a MUC component whose new rooms open at once (no configuration step), and an HTTP
    File Upload component (XEP-0363, mod_http_file_share) on plain HTTP on another loopback port, its
    URLs on 127.0.0.1 (`http_host`) so they reach it without DNS."""

    def __init__(self) -> None:
        if shutil.which(PROSODY) is None:
            pytest.skip("prosody is not installed (setup.sh installs it: apt-get install prosody)")
        self.dir = Path(tempfile.mkdtemp(prefix="hermetic-prosody-"))
        self.port, self.http_port = free_port(), free_port()
        self.accounts: set[str] = set()
        self.config = self.dir / "prosody.cfg.lua"
        (self.dir / "data").mkdir()
        self.config.write_text(
            f'daemonize = false\npidfile = "{self.dir}/pid"\ndata_path = "{self.dir}/data"\n'
            f'log = {{ warn = "*console" }}\ncertificates = "{self.dir}"\n'
            f'interfaces = {{ "127.0.0.1" }}\nc2s_ports = {{ {self.port} }}\nc2s_direct_tls_ports = {{ }}\n'
            f"s2s_ports = {{ }}\ncomponent_ports = {{ }}\nhttp_ports = {{ {self.http_port} }}\n"
            'http_interfaces = { "127.0.0.1" }\nhttps_ports = { }\n'
            'modules_enabled = { "disco", "roster", "saslauth", "ping", "offline" }\n'
            'modules_disabled = { "s2s" }\nc2s_require_encryption = false\n'
            "allow_unencrypted_plain_auth = true\nmuc_room_locking = false\n"
            f'VirtualHost "{DOMAIN}"\nComponent "{ROOMS}" "muc"\n'
            f'Component "{UPLOADS}" "http_file_share"\n  http_host = "127.0.0.1"\n'
            f"  http_file_share_size_limit = {UPLOAD_LIMIT}\n"
        )
        user: dict[str, Any] = {}
        if os.geteuid() == 0:  # Prosody will not run as root, and prosodyctl drops to its user
            account = pwd.getpwnam("prosody")
            for path in (self.dir, self.dir / "data"):
                os.chown(path, account.pw_uid, account.pw_gid)
            user = {"user": account.pw_uid, "group": account.pw_gid}
        self.proc = subprocess.Popen(
            [PROSODY, "--config", str(self.config), "-F"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **user,
        )  # fmt: skip
        until_listening(self.proc, self.port, "prosody", self.close)

    def register(self, user: str) -> str:
        """An account `user@xmpp.test` with PASSWORD (once); its JID."""
        if user in self.accounts:
            return f"{user}@{DOMAIN}"
        self.accounts.add(user)
        subprocess.run(
            ["prosodyctl", "--config", str(self.config), "register", user, DOMAIN, PASSWORD],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        return f"{user}@{DOMAIN}"

    def close(self) -> None:
        stop(self.proc, self.dir)


@pytest.fixture(scope="session")
def xmpp_server() -> Iterator[Prosody]:
    server = Prosody()
    yield server
    server.close()


@dataclass
class Heard:
    sender: str
    """The bare JID (one-to-one) or the room's occupant JID (room/nick)."""
    body: str
    id: str
    replaces: str | None
    """The id of the message this one corrects (XEP-0308)."""
    oob: str | None = None
    """The URL of a file sent with it (XEP-0066, jabber:x:oob)."""


class XmppUser:
    """A person: logs in, joins rooms, says things, and hears every message (corrections included)."""

    def __init__(self, server: Prosody, user: str, resource: str = "phone") -> None:
        self.jid = server.register(user)
        self.heard: queue.Queue[Heard] = queue.Queue()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.client: slixmpp.ClientXMPP = self._call(self._login(server.port, resource))

    def _call(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _login(self, port: int, resource: str) -> slixmpp.ClientXMPP:
        plain = {"unencrypted_plain": True, "unencrypted_scram": True}
        client = slixmpp.ClientXMPP(
            f"{self.jid}/{resource}", PASSWORD, plugin_config={"feature_mechanisms": plain}
        )
        for plugin in ("xep_0030", "xep_0045", "xep_0066", "xep_0308", "xep_0363"):
            client.register_plugin(plugin)
        client.enable_direct_tls = client.enable_plaintext = False
        started: asyncio.Future[None] = self.loop.create_future()
        client.add_event_handler("session_start", lambda _: started.done() or started.set_result(None))  # type: ignore[func-returns-value]
        client.add_event_handler("message", self._message)
        client.connect("127.0.0.1", port)
        await asyncio.wait_for(started, 20)
        client.send_presence()
        return client

    def _message(self, message: Any) -> None:
        if message["type"] in ("chat", "normal", "groupchat") and message["body"]:
            replaces = message["replace"]["id"] or None
            sender = message["from"]
            who = str(sender) if message["type"] == "groupchat" else sender.bare
            oob = message["oob"]["url"] or None
            self.heard.put(Heard(who, message["body"], message["id"], replaces, oob))

    def say(self, to: str, text: str, kind: str = "chat") -> None:
        async def send() -> None:
            self.client.send_message(mto=slixmpp.JID(to), mbody=text, mtype=kind)  # type: ignore[arg-type]

        self._call(send())

    def send_file(self, to: str, name: str, data: bytes, text: str | None = None) -> str:
        """Upload `data` to the server's HTTP upload (XEP-0363) and send its URL as a client does: in
        the body (or `text`) and as jabber:x:oob; the URL."""

        async def send() -> str:
            url = str(
                await self.client.plugin["xep_0363"].upload_file(
                    name, size=len(data), input_file=io.BytesIO(data), timeout=20
                )
            )
            message = self.client.make_message(mto=slixmpp.JID(to), mbody=text or url, mtype="chat")
            message["oob"]["url"] = url
            message.send()
            return url

        return str(self._call(send()))

    def join(self, room: str, nick: str) -> None:
        muc = self.client.plugin["xep_0045"]
        self._call(muc.join_muc_wait(slixmpp.JID(room), nick, maxstanzas=0, timeout=20))

    def occupants(self, room: str) -> list[str]:
        async def roster() -> list[str]:
            return list(self.client.plugin["xep_0045"].get_roster(slixmpp.JID(room)) or [])

        return list(self._call(roster()))

    def wait_offline(self, jid: str, timeout: float = REPLY_TIMEOUT) -> None:
        """Until the server says `jid` (a full JID) is not online: a disco query it cannot route."""

        async def online() -> bool:
            ping = self.client.make_iq_get(
                queryxmlns="http://jabber.org/protocol/disco#info", ito=slixmpp.JID(jid)
            )
            try:
                await ping.send(timeout=10)
            except slixmpp.exceptions.IqError:
                return False
            return True

        deadline = time.monotonic() + timeout
        while self._call(online()):
            assert time.monotonic() < deadline, f"{jid} stayed online"

    def hear(self, timeout: float = REPLY_TIMEOUT) -> Heard:
        return self.heard.get(timeout=timeout)

    def hear_reply(self, last_words: str, timeout: float = REPLY_TIMEOUT) -> tuple[Heard, list[Heard]]:
        """The first message of a reply and its corrections, up to the one that ends with `last_words`."""
        first = self.hear(timeout)
        corrections: list[Heard] = []
        while not (corrections[-1] if corrections else first).body.endswith(last_words):
            corrections.append(self.hear(timeout))
        return first, corrections

    def close(self) -> None:
        async def leave() -> None:
            await self.client.disconnect(wait=2)
            this = asyncio.current_task()
            for task in asyncio.all_tasks():  # slixmpp's filters: ended here, not destroyed pending
                if task is not this:
                    task.cancel()

        try:
            self._call(leave(), 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()


def xmpp_config(server: Prosody, jid: str, **extra: Any) -> dict[str, Any]:
    """The gateway's `xmpp:` settings for a bot account on this server."""
    return {
        "jid": jid,
        "password": PASSWORD,
        "host": "127.0.0.1",
        "port": server.port,
        "tls": False,
        "edit_interval": 0.05,
    } | extra


def final_texts(heard: list[Heard]) -> dict[str, str]:
    """Each message's text once its corrections are applied, by the id of the first."""
    texts: dict[str, str] = {}
    for message in heard:
        texts[message.replaces or message.id] = message.body
    return texts
