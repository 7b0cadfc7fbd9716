"""IRC through pydle (asyncio-native, with IRCv3 capability negotiation and SASL): private messages,
and the channels of `allow_chats`, where the bot answers lines addressed to its nick (`nick: ...`).

IRC has no message ids, edits, buttons, files or history: a reply goes out once it is complete (no
streaming), line by line through a flood pacer; approvals are answered by replying with a choice;
files are refused with the reason. Nothing acknowledges a line, and a line said while the gateway was
down is gone: what the gateway stored and had not answered is answered after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pydle
from pydle.features import IRCv3Support, ISUPPORTSupport, RFC1459Support, TLSSupport

from ..config.chat import IrcSettings
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound
from .plain import addressed, to_plain
from .text import split

LINE_BYTES = 400
"""A PRIVMSG's text and target within IRC's 512-byte line, leaving room for the `:nick!user@host`
prefix the server puts in front when it relays the line."""
REGISTER_TIMEOUT = 30.0
QUIT_TIMEOUT = 5.0
ONLINE_WAIT = 30.0
"""How long a reply waits for the bot to be (back) on the server before it counts as not sent."""


def _utf8_length(text: str) -> int:
    return len(text.encode())


class Pacer:
    """A token bucket for outgoing lines: `burst` at once, then one per `interval` seconds."""

    def __init__(
        self,
        burst: int,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.burst, self.interval, self.clock, self.sleep = burst, interval, clock, sleep
        self._tokens = float(burst)
        self._at = clock()

    async def wait(self) -> None:
        """Return when one more line may go out."""
        now = self.clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) / self.interval)
        self._at = now
        if self._tokens < 1:
            await self.sleep((1 - self._tokens) * self.interval)
            self._tokens, self._at = 1.0, self.clock()
        self._tokens -= 1


class _Client(pydle.featurize(IRCv3Support, ISUPPORTSupport, TLSSupport, RFC1459Support)):  # type: ignore[misc]
    RECONNECT_ON_ERROR = False  # the gateway reconnects, with its backoff

    def __init__(self, adapter: IrcAdapter, nick: str, **sasl: Any) -> None:
        super().__init__(nick, **sasl)
        self.adapter = adapter
        self.inbox = adapter._inbox  # this connection's: a late disconnect must not end the next one
        self.closed = asyncio.Event()

    async def _create_user(self, nickname: str) -> None:
        # pydle awaits this hook, which only its WHOX feature (a WHOIS per new nick) makes async
        super()._create_user(nickname)

    async def on_connect(self) -> None:
        await super().on_connect()
        await self.adapter._registered()

    async def on_raw_privmsg(self, message: Any) -> None:
        # not pydle's on_message: its user bookkeeping may await a WHOIS first, and lines would overtake
        # one another; here each is queued in the order it came
        target, text = message.params[:2]
        found = self.adapter._heard(message.source or "", target, text, message.tags.get("msgid"))
        if found is not None:
            self.inbox.put_nowait(found)

    async def on_raw_error(self, message: Any) -> None:
        self.adapter._closed_by = " ".join(message.params)
        await super().on_raw_error(message)

    async def on_raw_464(self, message: Any) -> None:  # ERR_PASSWDMISMATCH
        self.adapter._refusal = "the server refused the password"

    async def on_raw_904(self, message: Any) -> None:  # ERR_SASLFAIL
        self.adapter._refusal = "the server refused the SASL credentials"
        await super().on_raw_904(message)

    async def on_raw_432(self, message: Any) -> None:  # ERR_ERRONEUSNICKNAME
        self.adapter._refusal = f"the server refused the nick {self.adapter.settings.nick!r}"
        await self.disconnect(expected=True)

    async def on_raw_433(self, message: Any) -> None:  # ERR_NICKNAMEINUSE
        # not pydle's fallback `nick_`: people address the configured nick. A ghost of a killed gateway
        # holds it until the server times it out; the gateway's backoff tries again meanwhile
        self.adapter._not_ready(ConnectionLost(f"IRC: the nick {self.adapter.settings.nick!r} is in use"))
        await self.disconnect(expected=True)

    async def on_disconnect(self, expected: bool) -> None:
        # not pydle's: it would reconnect, or log a "giving up"; the gateway's backoff decides
        self.closed.set()
        self.adapter._online.clear()
        refusal = self.adapter._refusal
        closed = ConnectionLost(f"IRC: {self.adapter._closed_by or 'the server closed the connection'}")
        self.adapter._not_ready(AdapterError(f"IRC: {refusal}") if refusal else closed)
        self.inbox.put_nowait(None)


class IrcAdapter(Adapter):
    platform = "irc"
    text_limit = 4000
    """One message's worth of Markdown; it goes out as many lines (each within LINE_BYTES)."""
    streams = False
    buttons = False

    def __init__(self, settings: IrcSettings) -> None:
        self.settings = settings
        self.client: _Client | None = None
        self._inbox: asyncio.Queue[Inbound | None] = asyncio.Queue()
        self._ready: asyncio.Future[None] | None = None
        self._online = asyncio.Event()
        """Registered: a reply waits for it (a turn rerun at start-up may end before the bot is in)."""
        self._refusal: str | None = None
        """Why the server refused the bot (a password, SASL, the nick): not worth retrying."""
        self._closed_by: str | None = None
        self._pacer = Pacer(settings.flood_burst, settings.flood_interval)
        self._sending = asyncio.Lock()

    @property
    def lock_name(self) -> str:
        return f"irc:{self.settings.host}:{self.settings.port}:{self.settings.nick.lower()}"

    async def connect(self) -> None:
        settings = self.settings
        sasl: dict[str, Any] = {}
        if settings.sasl_username and settings.sasl_password:
            sasl = {
                "sasl_username": settings.sasl_username,
                "sasl_password": settings.sasl_password.get_secret_value(),
                "sasl_mechanism": "PLAIN",
            }
        self._inbox = asyncio.Queue()
        self.client = _Client(self, settings.nick, **sasl)
        self._refusal = self._closed_by = None
        self._ready = asyncio.get_running_loop().create_future()
        password = settings.password.get_secret_value() if settings.password else None
        try:
            await self.client.connect(
                settings.host,
                settings.port,
                password=password,
                tls=settings.tls,
                tls_verify=settings.tls_verify,
            )
            await asyncio.wait_for(asyncio.shield(self._ready), REGISTER_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            await self.disconnect()
            raise ConnectionLost(f"IRC server {settings.host}:{settings.port} unreachable: {exc}") from exc
        except (AdapterError, ConnectionLost):
            await self.disconnect()
            raise

    def _not_ready(self, error: Exception) -> None:
        """Registration failed (a refusal, a lost connection): connect raises `error`."""
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error)

    async def _registered(self) -> None:
        """Welcomed (001): check SASL was done when configured, join the allowed channels."""
        assert self.client is not None and self._ready is not None
        if self.settings.sasl_username and not self.client._capabilities.get("sasl"):
            self._not_ready(AdapterError("SASL is configured but this IRC server does not offer it"))
            return
        for channel in self.settings.allow_chats:
            await self.client.join(channel)
        self._ready.set_result(None)
        self._online.set()

    def _heard(self, source: str, target: str, text: str, msgid: str | None) -> Inbound | None:
        """The message a PRIVMSG is for the gateway, if it is one (not CTCP, not said to others)."""
        nick = source.split("!", 1)[0]
        me = self.client.nickname if self.client else self.settings.nick
        direct = not target.startswith(("#", "&", "+", "!"))
        if text.startswith("\x01") or nick.lower() == me.lower():  # CTCP (ACTION, VERSION), or our echo
            return None
        if not direct:
            said = addressed(text, me)
            if said is None:
                return None  # said in the channel, not to the bot
            text = said
        return Inbound(
            platform=self.platform,
            chat=nick if direct else target,
            message_id=msgid or uuid.uuid4().hex,  # IRC has no ids (unless the message-tags msgid)
            user=nick,
            user_name=nick,
            text=text,
            direct=direct,
        )

    async def disconnect(self) -> None:
        client, self.client = self.client, None
        if client is None or not client.connected:
            return
        await client.rawmsg("QUIT", "bye")
        # the server frees the nick, then closes the link: wait for that, so a gateway started next
        # finds the nick free
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(client.closed.wait(), QUIT_TIMEOUT)
        if client.connected:
            await client.disconnect(expected=True)

    async def receive(self, deliver: Deliver) -> None:
        while (message := await self._inbox.get()) is not None:
            await deliver(message)
        raise ConnectionLost(f"IRC: {self._closed_by or 'the server closed the connection'}")

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        """Each line of the reply as a PRIVMSG (long lines cut within LINE_BYTES), paced."""
        limit = LINE_BYTES - len(chat.encode())
        lines = [
            part
            for line in to_plain(text).splitlines()
            if line.strip()
            for part in split(line, limit, _utf8_length)
        ]
        try:
            await asyncio.wait_for(self._online.wait(), ONLINE_WAIT)
        except TimeoutError as exc:
            raise ConnectionLost("IRC: not connected") from exc
        async with self._sending:  # one reply's lines stay together
            for line in lines or ["…"]:
                await self._pacer.wait()
                await self._raw("PRIVMSG", chat, line)
        return uuid.uuid4().hex

    async def _raw(self, *params: str) -> None:
        client = self.client
        if client is None or not client.connected:
            raise ConnectionLost("IRC: not connected")
        try:
            await client.rawmsg(*params)
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"IRC: {exc}") from exc

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        return None  # IRC has no edits: replies are sent whole (streams = False)

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        raise AdapterError("IRC carries no files (DCC is peer to peer, outside the server): say where it is")

    async def fetch(self, attachment: Attachment) -> bytes:
        raise AdapterError("IRC carries no files")
