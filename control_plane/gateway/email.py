"""Email: a mailbox read over IMAP with aioimaplib, woken by IDLE (RFC 2177) rather than by polling, and
answered over SMTP with aiosmtplib. One session per thread: the thread's root Message-ID is the chat's
thread, and every reply carries In-Reply-To and References, so mail clients show it in the same thread.

Mail is taken in UID order; the highest UID handled is kept in the gateway's store once the mail is
stored there, so a mail that arrived while the gateway was down is read at the next start, and one read
before a crash is recognised by its Message-ID: each is answered once. Mail a machine sent (bounces,
auto-replies, list mail: email_parts.automated) is never answered. Replies go out whole (no edits);
approvals are answered by replying with the choice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from collections.abc import AsyncIterator, Callable
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import aioimaplib
import aiosmtplib

from ..config.chat import EmailSettings
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound
from .email_parts import (
    Thread,
    attachments,
    automated,
    body_text,
    compose,
    message_ids,
    parse,
    sender,
    thread_of,
)
from .records import GatewayStore

log = logging.getLogger("hermetic.gateway.email")
# aioimaplib logs each mail a server announces outside IDLE as "ignored" (at INFO): _Protocol reads them
logging.getLogger("aioimaplib.aioimaplib").setLevel(logging.WARNING)
IMAP_TIMEOUT = 30.0
SMTP_TIMEOUT = 60.0
IDLE_RENEW = 25 * 60.0
"""Seconds before IDLE is ended and begun again: servers drop an IDLE after 30 minutes (RFC 2177)."""
_UIDS = re.compile(rb"\[(UIDVALIDITY|UIDNEXT) (\d+)\]")


class _Protocol(aioimaplib.IMAP4ClientProtocol):  # type: ignore[misc]
    """aioimaplib's protocol, telling of the new mail a server announces in the response to a command
    that did not ask (FETCH, STORE): aioimaplib drops such lines, and IDLE would not announce it again."""

    def __init__(self, loop: asyncio.AbstractEventLoop, lost: Callable[[Any], None], new: Callable[[], None]):
        super().__init__(loop, lost)
        self.new = new

    def _untagged_response(self, line: bytes) -> Any:
        if line.rstrip().endswith(b" EXISTS"):
            self.new()
        return super()._untagged_response(line)


class _Imap(aioimaplib.IMAP4):  # type: ignore[misc]
    """aioimaplib's client on _Protocol (its create_client, with that protocol)."""

    def __init__(self, new: Callable[[], None], *args: Any, **kwargs: Any) -> None:
        self.new = new
        super().__init__(*args, **kwargs)

    def create_client(
        self, host: str, port: int, loop: Any, conn_lost_cb: Any = None, ssl_context: Any = None
    ) -> None:
        loop = loop or asyncio.get_running_loop()
        self.protocol = _Protocol(loop, conn_lost_cb, self.new)
        connecting = loop.create_connection(lambda: self.protocol, host, port, ssl=ssl_context)
        self._client_task = loop.create_task(connecting)


class EmailAdapter(Adapter):
    platform = "email"
    text_limit = 200_000
    """Characters per mail: mail has no limit a reply reaches; beyond this a reply goes as several."""
    streams = False
    buttons = False

    def __init__(self, settings: EmailSettings, store: GatewayStore) -> None:
        self.settings, self.store = settings, store
        self.imap: aioimaplib.IMAP4 | None = None
        self._lost = asyncio.Event()
        self._validity = 0
        self._more = False
        """New mail was announced outside IDLE (in the response to another command)."""
        self._domain = settings.address.rsplit("@", 1)[1]

    @property
    def lock_name(self) -> str:
        return f"email:{self.settings.address.lower()}"

    def _key(self, what: str) -> str:
        return f"email:{what}:{self.settings.address.lower()}"

    # -- IMAP --------------------------------------------------------------------------------

    async def _open(self, lost: asyncio.Event, new: Callable[[], None]) -> tuple[aioimaplib.IMAP4, int, int]:
        """A logged-in IMAP connection with the mailbox selected (`lost` set when it drops, `new` called
        when the server says more mail came); its UIDVALIDITY and UIDNEXT. Raises ConnectionLost
        (unreachable), AdapterError (refused)."""
        settings = self.settings
        context = None
        if settings.imap_security == "tls":
            context = ssl.create_default_context()
            if not settings.tls_verify:
                context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        imap = _Imap(
            new,
            settings.imap_host, settings.imap_port, timeout=IMAP_TIMEOUT,
            conn_lost_cb=lambda _: lost.set(), ssl_context=context,
        )  # fmt: skip
        where = f"IMAP {settings.imap_host}:{settings.imap_port}"
        try:
            await imap.wait_hello_from_server()
            login = await imap.login(settings.login, settings.password.get_secret_value())
            if login.result != "OK":
                raise AdapterError(f"{where} refused the login of {settings.login}")
            selected = await imap.select(settings.mailbox)
            if selected.result != "OK":
                raise AdapterError(f"{where}: no mailbox {settings.mailbox!r}")
            if not imap.has_capability("IDLE"):
                raise AdapterError(f"{where} does not offer IDLE")
        except (OSError, TimeoutError, aioimaplib.AioImapException) as exc:
            await _close(imap)
            raise ConnectionLost(f"{where} unreachable: {exc or type(exc).__name__}") from exc
        except AdapterError:
            await _close(imap)
            raise
        numbers = {name: int(value) for line in selected.lines for name, value in _UIDS.findall(bytes(line))}
        return imap, numbers.get(b"UIDVALIDITY", 0), numbers.get(b"UIDNEXT", 1)

    async def connect(self) -> None:
        await self.disconnect()
        self._lost = asyncio.Event()
        self.imap, self._validity, uidnext = await self._open(self._lost, self._announced)
        saved = await asyncio.to_thread(self.store.get_state, self._key("uid"))
        validity, _, _ = (saved or "").partition(":")
        if validity != str(self._validity):  # a first start (or a mailbox made anew): from now on
            if saved:
                log.warning("email: %s was made anew (UIDVALIDITY changed)", self.settings.mailbox)
            await self._handled(uidnext - 1)
        async with self._smtp():  # the SMTP login checked now, not at the first reply
            pass

    def _announced(self) -> None:
        self._more = True

    async def _handled(self, uid: int) -> None:
        await asyncio.to_thread(self.store.set_state, self._key("uid"), f"{self._validity}:{uid}")

    async def disconnect(self) -> None:
        imap, self.imap = self.imap, None
        if imap is not None:
            await _close(imap)

    async def receive(self, deliver: Deliver) -> None:
        """Read what came after the last UID handled, then IDLE until the server says more came."""
        while True:
            self._more = False
            await self._catch_up(deliver)
            if not self._more:  # mail announced during the catch-up is read before IDLE
                await self._idle()

    async def _catch_up(self, deliver: Deliver) -> None:
        imap = self._imap()
        saved = await asyncio.to_thread(self.store.get_state, self._key("uid"))
        last = int((saved or "0:0").partition(":")[2])
        found = await self._call(imap.uid_search(f"UID {last + 1}:*", charset=None))
        if found.result != "OK":
            raise ConnectionLost(f"IMAP: the search for new mail failed: {found.result} {found.lines[-1:]}")
        uids = [int(n) for n in bytes(found.lines[0]).split() if n.isdigit()]
        # `N:*` always matches the newest mail, even below N: only UIDs above `last` are new
        for uid in sorted(uid for uid in uids if uid > last):
            raw = await self._fetch(imap, uid)
            try:
                message = parse(raw)
                reason = automated(message, self.settings.address)
                inbound = None if reason is not None else await self._inbound(message, uid)
            except Exception:  # a mail this code cannot read must not block the ones after it
                log.exception("email: mail %s cannot be read; left unread in the mailbox", uid)
                await self._handled(uid)
                continue
            if inbound is None:
                log.info("email: mail %s from %s not answered: %s", uid, sender(message)[0], reason)
            else:
                await deliver(inbound)
            await self._call(imap.uid("store", str(uid), "+FLAGS", r"(\Seen)"))
            await self._handled(uid)

    async def _idle(self) -> None:
        imap = self._imap()
        try:
            idle = await imap.idle_start(timeout=IDLE_RENEW)
        except aioimaplib.AioImapException as exc:
            raise ConnectionLost(f"IMAP: IDLE failed: {exc}") from exc
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            while imap.has_pending_idle():
                push = asyncio.ensure_future(imap.wait_server_push(IDLE_RENEW + 60))
                await asyncio.wait({push, lost}, return_when=asyncio.FIRST_COMPLETED)
                if lost.done():
                    push.cancel()
                    raise ConnectionLost("IMAP: the server closed the connection")
                said = push.result()
                if said == aioimaplib.STOP_WAIT_SERVER_PUSH or any(b"EXISTS" in bytes(x) for x in said):
                    imap.idle_done()
                    await self._call(idle)
                    return
        except TimeoutError as exc:
            raise ConnectionLost("IMAP: the server went quiet in IDLE") from exc
        finally:
            lost.cancel()
            idle.cancel()  # a gateway stopping mid-IDLE: the command's task ends with it

    def _imap(self) -> aioimaplib.IMAP4:
        if self.imap is None or self._lost.is_set():
            raise ConnectionLost("IMAP: not connected")
        return self.imap

    @staticmethod
    async def _call(command: object) -> aioimaplib.Response:
        try:
            response: aioimaplib.Response = await asyncio.wait_for(command, IMAP_TIMEOUT)  # type: ignore[arg-type]
        except (OSError, TimeoutError, aioimaplib.AioImapException) as exc:
            raise ConnectionLost(f"IMAP: {exc or type(exc).__name__}") from exc
        return response

    async def _fetch(self, imap: aioimaplib.IMAP4, uid: int) -> bytes:
        """One mail's bytes (BODY.PEEK: not marked read until it is stored)."""
        fetched = await self._call(imap.uid("fetch", str(uid), "(BODY.PEEK[])"))
        raw = next((bytes(line) for line in fetched.lines if isinstance(line, bytearray)), None)
        if fetched.result != "OK" or raw is None:
            raise ConnectionLost(f"IMAP: mail {uid} could not be read: {fetched.result}")
        return raw

    async def _inbound(self, message: EmailMessage, uid: int) -> Inbound:
        if not message_ids(message.get("Message-ID")):  # rare, but it is the mail's id here
            message["Message-ID"] = f"<uid-{self._validity}-{uid}@{self._domain}>"
        address, name = sender(message)
        root, thread = thread_of(message)
        await asyncio.to_thread(self.store.set_state, self._key(f"thread:{root}"), thread.model_dump_json())
        text = body_text(message)
        if not thread.references[:-1] and thread.subject and not text.startswith("/"):
            text = f"(subject: {thread.subject})\n\n{text}"  # a thread's first mail: its subject says much
        files = [
            Attachment(name=file_name, ref=f"{self._validity}:{uid}:{number}", size=len(data))
            for number, (file_name, data) in enumerate(attachments(message))
        ]
        return Inbound(
            platform=self.platform, chat=address, message_id=thread.references[-1], user=address,
            user_name=name, text=text, thread=root, files=files,
        )  # fmt: skip

    async def fetch(self, attachment: Attachment) -> bytes:
        """The attached file, read again from the mail on a connection of its own (the receiving one
        is in IDLE)."""
        validity, uid, number = (int(n) for n in attachment.ref.split(":"))
        imap, now_valid, _ = await self._open(asyncio.Event(), lambda: None)
        try:
            if now_valid != validity:
                raise AdapterError("the mail with this file is gone (the mailbox was made anew)")
            files = attachments(parse(await self._fetch(imap, uid)))
        finally:
            await _close(imap)
        if number >= len(files):
            raise AdapterError(f"mail {uid} has no attachment {number}")
        return files[number][1]

    # -- SMTP --------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _smtp(self) -> AsyncIterator[aiosmtplib.SMTP]:
        """A logged-in SMTP session; its errors as AdapterError (refused) or ConnectionLost."""
        settings = self.settings
        plain = settings.smtp_security == "none"
        client = aiosmtplib.SMTP(
            hostname=settings.smtp_host, port=settings.smtp_port, timeout=SMTP_TIMEOUT,
            use_tls=settings.smtp_security == "tls", start_tls=settings.smtp_security == "starttls",
            validate_certs=settings.tls_verify, username=None if plain else settings.login,
            password=None if plain else settings.password.get_secret_value(),
        )  # fmt: skip
        try:
            async with client:
                yield client
        except aiosmtplib.SMTPAuthenticationError as exc:
            raise AdapterError(f"SMTP refused the login of {settings.login}: {exc.message}") from exc
        except aiosmtplib.SMTPRecipientsRefused as exc:
            refused = exc.recipients[0]
            raise AdapterError(f"SMTP refused the recipient {refused.recipient}: {refused.message}") from exc
        except aiosmtplib.SMTPResponseException as exc:
            if exc.code >= 500:
                raise AdapterError(f"SMTP refused the mail: {exc.code} {exc.message}") from exc
            raise ConnectionLost(f"SMTP: {exc.code} {exc.message}") from exc
        except (OSError, TimeoutError, aiosmtplib.SMTPException) as exc:
            raise ConnectionLost(f"SMTP {settings.smtp_host}:{settings.smtp_port}: {exc}") from exc

    async def _thread(self, thread: str | None) -> Thread:
        """The thread a reply continues (as its last mail left it), or a new one."""
        key = self._key(f"thread:{thread}")
        saved = await asyncio.to_thread(self.store.get_state, key) if thread else None
        return (
            Thread.model_validate_json(saved)
            if saved
            else Thread(subject=self.settings.subject, references=[])
        )

    async def _post(self, chat: str, thread: str | None, text: str, file: Path | None = None) -> str:
        settings = self.settings
        on = await self._thread(thread)
        message = compose(settings.address, settings.display_name, chat, on, text, self._domain, file)
        async with self._smtp() as smtp:
            await smtp.send_message(message)
        return str(message["Message-ID"])

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        return await self._post(chat, thread, text)

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        return None  # a sent mail stays as it is: replies go out whole (streams = False)

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        return await self._post(chat, thread, caption or path.name, path)


async def _close(imap: aioimaplib.IMAP4) -> None:
    """Log out (ending IDLE first); a connection already gone needs no goodbye."""
    with contextlib.suppress(Exception):
        if imap.has_pending_idle():
            imap.idle_done()
        await asyncio.wait_for(imap.logout(), 5)
