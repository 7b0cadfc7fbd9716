"""XMPP through slixmpp (asyncio): one-to-one chats, and the MUC rooms of `allow_chats`, where the bot
answers messages addressed to its nick (`nick: ...`).

A reply streams as one message corrected in place (XEP-0308, Last Message Correction); bodies are plain
text (the Markdown through gateway/plain.py, as most clients show bodies as written). XMPP has no
buttons: approvals are answered by replying with a choice. A file goes out through the server's HTTP
File Upload (XEP-0363: a slot, a PUT) and its URL as the body and XEP-0066 (jabber:x:oob), so clients
show it; a URL a user sends that way (or as the whole body) is downloaded when it is on one of
`file_hosts` (the server's upload host: any other address could point the gateway anywhere). The
server keeps a one-to-one message sent while the gateway was away (offline storage) and hands it over
at the next login, where it is answered; what the gateway stored and had not answered is answered
after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
import uuid
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import aiohttp
import slixmpp
from slixmpp.exceptions import IqError, IqTimeout, PresenceError
from slixmpp.plugins.xep_0363.http_upload import FileUploadError, UploadServiceNotFound

from ..config.chat import XmppSettings
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound
from .files import download, listed_host
from .plain import addressed, to_plain

LOGIN_TIMEOUT = 30.0
JOIN_TIMEOUT = 30.0
CLOSE_TIMEOUT = 5.0
ONLINE_WAIT = 30.0
"""Seconds a reply waits for the stream to be up (a turn rerun at start-up, a reconnection)."""
UPLOAD_TIMEOUT = 60.0
_URL = re.compile(r"https?://\S+")


class XmppAdapter(Adapter):
    platform = "xmpp"
    text_limit = 8000
    """Characters per message: servers cap a stanza's bytes (Prosody: 256 KiB), clients show less."""
    buttons = False

    def __init__(self, settings: XmppSettings) -> None:
        self.settings = settings
        self.client: slixmpp.ClientXMPP | None = None
        self._inbox: asyncio.Queue[Inbound | None] = asyncio.Queue()
        self._rooms: set[str] = set()
        self._online = asyncio.Event()
        self._closed_by = "the server closed the stream"

    @property
    def lock_name(self) -> str:
        return f"xmpp:{self.settings.jid.lower()}"

    async def connect(self) -> None:
        await self.disconnect()  # a reconnection: the dropped client's attempts end here
        settings = self.settings
        plain = not settings.tls  # only then may the password go out before TLS
        client = slixmpp.ClientXMPP(
            f"{settings.jid}/{settings.resource}",
            settings.password.get_secret_value(),
            plugin_config={"feature_mechanisms": {"unencrypted_plain": plain, "unencrypted_scram": plain}},
        )
        for plugin in ("xep_0030", "xep_0045", "xep_0066", "xep_0203", "xep_0308", "xep_0363"):
            client.register_plugin(plugin)
        client.auto_authorize = client.auto_subscribe = False  # no presence to strangers
        # one attempt on the c2s port (STARTTLS offered there): connection_failed then means down
        client.enable_direct_tls, client.enable_plaintext = False, False
        if not settings.tls_verify:
            client.ssl_context.check_hostname = False
            client.ssl_context.verify_mode = ssl.CERT_NONE
        self.client, self._inbox, self._rooms = client, asyncio.Queue(), set()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def fail(error: Exception) -> None:
            if not ready.done():
                ready.set_exception(error)

        def started(_: Any) -> None:
            if not ready.done():
                ready.set_result(None)

        client.add_event_handler("session_start", started)
        client.add_event_handler(
            "failed_auth", lambda _: fail(AdapterError("XMPP: the server refused the password"))
        )
        client.add_event_handler(
            "no_auth", lambda _: fail(AdapterError("XMPP: no way to log in (the server offered no TLS?)"))
        )
        client.add_event_handler("connection_failed", lambda e: fail(ConnectionLost(f"XMPP: {e}")))
        client.add_event_handler("stream_error", self._stream_error)
        client.add_event_handler("disconnected", lambda _: self._disconnected(client, fail))
        client.add_event_handler("message", self._message)
        client.connect(settings.host, settings.port) if settings.host else client.connect()
        try:
            await asyncio.wait_for(asyncio.shield(ready), LOGIN_TIMEOUT)
            client.send_presence()  # online: the server hands over what it kept meanwhile
            for room in settings.allow_chats:
                # no history: what was said before the join is not addressed to this session
                await client.plugin["xep_0045"].join_muc_wait(
                    slixmpp.JID(room), settings.nick, maxstanzas=0, timeout=JOIN_TIMEOUT
                )
                self._rooms.add(room)
        except TimeoutError as exc:
            await self.disconnect()
            raise ConnectionLost(f"XMPP: {settings.jid} not logged in or joined within the timeout") from exc
        except PresenceError as exc:
            await self.disconnect()
            raise AdapterError(f"XMPP: a room refused the join: {exc.condition} {exc.text}") from exc
        except (AdapterError, ConnectionLost):
            await self.disconnect()
            raise
        self._online.set()

    def _stream_error(self, error: Any) -> None:
        self._closed_by = f"stream error {error['condition']}: {error['text']}".rstrip(": ")

    def _disconnected(self, client: slixmpp.ClientXMPP, fail: Any) -> None:
        if client is not self.client:
            return  # a dropped client's late event
        client.cancel_connection_attempt()  # the gateway reconnects, with its backoff
        self._online.clear()
        fail(ConnectionLost(f"XMPP: {self._closed_by}"))
        self._inbox.put_nowait(None)

    def _message(self, message: Any) -> None:
        found = self._heard(message)
        if found is not None:
            self._inbox.put_nowait(found)

    def _heard(self, message: Any) -> Inbound | None:
        """The Inbound a message stanza is for the gateway, if it is one (a body, not ours, not history)."""
        kind, body, sender = message["type"], message["body"], message["from"]
        url = str(message["oob"]["url"]).strip()
        if kind not in ("chat", "normal", "groupchat") or not (body.strip() or url):
            return None  # errors, headlines, chat states
        direct = kind != "groupchat"
        if direct:
            if sender.bare == self.settings.jid or sender.bare in self._rooms:
                return None  # our other resource; a private message through a room (not allowed)
            user = sender.bare
        else:
            delayed = message.get_plugin("delay", check=True) is not None
            if sender.bare not in self._rooms or sender.resource == self.settings.nick or delayed:
                return None  # another room, our own echo, or the room's history
            text = addressed(body, self.settings.nick)
            if text is None:
                return None
            body = text
            occupant = self._occupant_jid(sender)
            user = occupant or str(sender)
        if not url and _URL.fullmatch(body.strip()) and listed_host(body.strip(), self.settings.file_hosts):
            url = body.strip()  # a client without XEP-0066 sends the upload's URL alone
        if url and body.strip() == url:
            body = ""  # the body only repeats the URL (for clients without XEP-0066)
        return Inbound(
            platform=self.platform,
            chat=sender.bare,
            message_id=message["id"] or uuid.uuid4().hex,
            user=user,
            user_name=sender.resource if not direct else sender.user,
            text=body,
            direct=direct,
            files=[Attachment(name=unquote(urlsplit(url).path.rsplit("/", 1)[-1]) or "file", ref=url)]
            if url
            else [],
        )

    def _occupant_jid(self, sender: slixmpp.JID) -> str | None:
        """The real bare JID behind a room occupant, where the room shows it (non-anonymous rooms)."""
        assert self.client is not None
        jid = self.client.plugin["xep_0045"].get_jid_property(
            slixmpp.JID(sender.bare), sender.resource, "jid"
        )
        return slixmpp.JID(jid).bare if jid else None

    async def disconnect(self) -> None:
        client, self.client = self.client, None
        self._online.clear()
        if client is None:
            return
        client.cancel_connection_attempt()
        if client.transport is not None:
            with contextlib.suppress(TimeoutError):  # slixmpp aborts the socket after `wait`
                await asyncio.wait_for(client.disconnect(wait=CLOSE_TIMEOUT), CLOSE_TIMEOUT + 1)

    async def receive(self, deliver: Deliver) -> None:
        while (message := await self._inbox.get()) is not None:
            await deliver(message)
        raise ConnectionLost(f"XMPP: {self._closed_by}")

    async def _ready(self) -> slixmpp.ClientXMPP:
        """The client, once the stream is up."""
        try:
            await asyncio.wait_for(self._online.wait(), ONLINE_WAIT)
        except TimeoutError as exc:
            raise ConnectionLost("XMPP: not connected") from exc
        assert self.client is not None
        return self.client

    def _kind(self, chat: str) -> Literal["groupchat", "chat"]:
        return "groupchat" if chat in self._rooms else "chat"

    async def _send(self, chat: str, text: str, replace: str | None = None) -> str:
        client = await self._ready()
        message = client.make_message(
            mto=slixmpp.JID(chat), mbody=to_plain(text) or "…", mtype=self._kind(chat)
        )
        message["id"] = uuid.uuid4().hex
        if replace is not None:
            message["replace"]["id"] = replace  # XEP-0308: always the first message's id
        message.send()
        return str(message["id"])

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        return await self._send(chat, text)

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        await self._send(chat, text, replace=message_id)

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        if caption:
            await self._send(chat, caption)
        client = await self._ready()
        try:
            with path.open("rb") as handle:
                url = await client.plugin["xep_0363"].upload_file(
                    path.name, input_file=handle, domain=slixmpp.JID(client.boundjid.domain),
                    timeout=UPLOAD_TIMEOUT,
                )  # fmt: skip
        except UploadServiceNotFound as exc:
            raise AdapterError(
                "the XMPP server offers no HTTP File Upload (XEP-0363): say where the file is"
            ) from exc
        except (FileUploadError, IqError) as exc:
            raise AdapterError(f"the XMPP server's HTTP upload refused the file: {exc}") from exc
        except (IqTimeout, aiohttp.ClientError, TimeoutError) as exc:
            raise ConnectionLost(f"XMPP: the HTTP upload did not complete: {exc!r}") from exc
        message = client.make_message(mto=slixmpp.JID(chat), mbody=str(url), mtype=self._kind(chat))
        message["id"] = uuid.uuid4().hex
        message["oob"]["url"] = str(url)  # XEP-0066: clients show the file (body == URL: inline)
        message.send()
        return str(message["id"])

    async def fetch(self, attachment: Attachment) -> bytes:
        if not listed_host(attachment.ref, self.settings.file_hosts):
            hosts = ", ".join(self.settings.file_hosts) or "no host (file_hosts is empty)"
            raise AdapterError(f"files are taken only from {hosts}, not from {attachment.ref[:200]}")
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            return await download(session, attachment.ref, self.settings.max_file_bytes, attachment.name)
