"""Matrix through matrix-nio's asyncio client: direct chats, and the rooms of `allow_chats`, where the bot
answers messages that mention it; threads (m.thread) answered in the thread.

The gateway runs its own /sync loop from the last `next_batch` it stored, which it stores only after
every event of a sync was delivered (the gateway has stored each by its event id by then): what was
said while the gateway was away comes in the first sync after a restart and is answered (within
`backfill_hours`, the newest `backfill_limit` per room), and a sync delivered twice after a crash is
recognised event by event. An invite is joined when the inviter is allowed (or admitted), the room is
in `allow_chats`, or it is a direct chat and pairing is on (the stranger then gets a code); others
are rejected.

A reply streams as one message edited in place (m.replace), its Markdown rendered to
org.matrix.custom.html. An approval's choices are reactions on the question (✅ the first, ❌ the
last), which the bot puts there to tap; a reply naming the choice answers it too. Files in are
downloaded from their mxc:// URL; files out are uploaded, then sent as m.image or m.file.

End-to-end encryption is not supported (nio needs python-olm and the libolm C library for it, and a
bot would need a persistent, verified device store): an encrypted room is told so, once, and left.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import mimetypes
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from nio import AsyncClient, AsyncClientConfig, ErrorResponse, InviteMemberEvent, MatrixRoom, SyncResponse

from ..config.chat import MatrixSettings
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound, RateLimited
from .matrix_content import (
    attachment_of,
    body_text,
    caption_of,
    choice_named,
    edit_content,
    file_content,
    message_content,
    reaction_keys,
    relation,
    replied_to,
    thread_of,
    with_choices,
)
from .plain import addressed
from .records import GatewayStore
from .stream import patiently

log = logging.getLogger("hermetic.gateway.matrix")
T = TypeVar("T")
TIMELINE_LIMIT = 100
"""Events per room one sync hands over: beyond it (a room busier than this while the gateway was away)
the oldest are not answered."""
REFUSED_ENCRYPTED = (
    "This room is end-to-end encrypted, and this Hermetic gateway has no end-to-end encryption, so it "
    "cannot read what is said here. Invite me to a room without encryption instead. Leaving."
)


class MatrixAdapter(Adapter):
    platform = "matrix"
    text_limit = 12000
    """UTF-8 bytes of Markdown per message: an event may hold 65,536 bytes of JSON, and an edit carries
    the text and its HTML twice (the fallback and m.new_content)."""

    @staticmethod
    def length(text: str) -> int:
        return len(text.encode())

    def __init__(self, settings: MatrixSettings, store: GatewayStore) -> None:
        self.settings = settings
        self.store = store
        self.client: AsyncClient | None = None
        account = f"{settings.homeserver.rstrip('/')}|{settings.user_id}"
        self._name = "matrix:" + hashlib.sha256(account.encode()).hexdigest()[:16]
        self._batch_key = f"{self._name}:next_batch"
        self._prompts: dict[str, list[Button]] = {}
        """Our questions' event ids -> their choices, while they are open."""
        self._caught_up = False

    @property
    def lock_name(self) -> str:
        return self._name

    async def connect(self) -> None:
        await self.disconnect()
        settings = self.settings
        # nio's own retries off: a 429 and a lost connection reach the gateway (its pacing, its backoff)
        config = AsyncClientConfig(
            max_limit_exceeded=0, max_timeouts=0, request_timeout=settings.sync_timeout + 30
        )
        client = AsyncClient(
            settings.homeserver, settings.user_id, device_id=settings.device_id, config=config
        )
        try:
            if settings.access_token is not None:
                client.restore_login(
                    settings.user_id, settings.device_id, settings.access_token.get_secret_value()
                )
                _check(await _call(client.whoami()), "the access token")
            else:
                assert settings.password is not None  # the settings require one of the two
                _check(await _call(client.login(settings.password.get_secret_value(), "Hermetic")), "login")
        except BaseException:
            await client.close()
            raise
        self.client, self._caught_up = client, False

    async def disconnect(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            await client.close()

    def _client(self) -> AsyncClient:
        if self.client is None:
            raise ConnectionLost("Matrix: not connected")
        return self.client

    async def receive(self, deliver: Deliver) -> None:
        client = self._client()
        sync_filter = {"room": {"timeline": {"limit": TIMELINE_LIMIT}}, "presence": {"types": []}}
        while True:
            since = await asyncio.to_thread(self.store.get_state, self._batch_key)

            async def synced(since: str | None = since) -> Any:
                answer = await _call(
                    client.sync(
                        timeout=int(self.settings.sync_timeout * 1000), sync_filter=sync_filter,
                        since=since, full_state=not self._caught_up,  # members: a restart knows none
                    )
                )  # fmt: skip
                return _check(answer, "sync")

            try:
                sync = await patiently(synced)
            except RateLimited as exc:  # a refusal to stop at, for other calls; here one to reconnect after
                raise ConnectionLost(f"Matrix: sync: {exc}") from exc
            assert isinstance(sync, SyncResponse)
            await self._invites(sync)
            for room_id, room in sync.rooms.join.items():
                events = [event.source for event in room.timeline.events]
                await self._room(room_id, events, deliver, first=since is None)
            await asyncio.to_thread(self.store.set_state, self._batch_key, sync.next_batch)
            self._caught_up = True

    async def _invites(self, sync: SyncResponse) -> None:
        client = self._client()
        for room_id, invite in sync.rooms.invite.items():
            # nio's parsing takes a member event's content out of its source: it is the `content` field
            mine = [
                e for e in invite.invite_state
                if isinstance(e, InviteMemberEvent) and e.state_key == client.user_id
            ]  # fmt: skip
            inviter = mine[-1].sender if mine else ""
            direct = bool(mine and mine[-1].content.get("is_direct"))
            welcome = await asyncio.to_thread(self._welcome, room_id, inviter, direct)
            log.log(
                logging.INFO if welcome else logging.WARNING, "%s the invite to %s from %s",
                "accepting" if welcome else "rejecting (not allowed)", room_id, inviter,
            )  # fmt: skip
            try:
                await patiently(functools.partial(self._join_or_reject, room_id, welcome))
            except AdapterError as exc:  # the invite was withdrawn meanwhile, say: the others still count
                log.warning("%s", exc)

    async def _join_or_reject(self, room_id: str, join: bool) -> None:
        client = self._client()
        _check(await _call(client.join(room_id) if join else client.room_leave(room_id)), room_id)

    def _welcome(self, room_id: str, inviter: str, direct: bool) -> bool:
        settings = self.settings
        return (
            room_id in settings.allow_chats
            or inviter in settings.allow_users
            or self.store.admitted(self.platform, inviter)
            or (direct and settings.pairing)
        )

    async def _room(self, room_id: str, events: list[dict[str, Any]], deliver: Deliver, first: bool) -> None:
        """Deliver a room's new events in order (none on the account's very first sync: that is the
        history of rooms joined before the gateway ever ran)."""
        client = self._client()
        room = client.rooms.get(room_id)
        if room is not None and room.encrypted:
            await self._refuse_encrypted(room_id)
            return
        if first:
            return
        direct = room is not None and room.member_count <= 2
        found = [m for event in events if (m := self._inbound(room_id, room, event, direct)) is not None]
        if not self._caught_up:  # what came while the gateway was away: within the backfill window
            oldest = time.time() - self.settings.backfill_hours * 3600
            stamps = {e.get("event_id"): e.get("origin_server_ts", 0) / 1000 for e in events}
            found = [m for m in found if stamps.get(m.message_id, 0) >= oldest]
            found = found[-self.settings.backfill_limit :] if self.settings.backfill_limit else []
        for inbound in found:
            await deliver(inbound)

    async def _refuse_encrypted(self, room_id: str) -> None:
        client = self._client()
        log.warning("leaving the end-to-end encrypted room %s: no encryption support", room_id)
        try:
            await self._send(room_id, {"msgtype": "m.notice", "body": REFUSED_ENCRYPTED})
        except AdapterError as exc:
            log.warning("cannot tell %s why: %s", room_id, exc)
        try:
            _check(await _call(client.room_leave(room_id)), f"leaving {room_id}")
        except AdapterError as exc:
            log.warning("%s", exc)

    def _inbound(
        self, room_id: str, room: MatrixRoom | None, event: dict[str, Any], direct: bool
    ) -> Inbound | None:
        """The Inbound a user's event is: a message (not an edit, not a bot's notice) or a reaction
        choosing one of an open question's choices."""
        sender, content = str(event.get("sender", "")), event.get("content")
        if sender == self._client().user_id or not isinstance(content, dict) or "event_id" not in event:
            return None
        name = (room.user_name(sender) or "") if room else ""
        base = {"platform": self.platform, "chat": room_id, "message_id": str(event["event_id"]),
                "user": sender, "user_name": name, "direct": direct}  # fmt: skip
        related = relation(content)
        if event.get("type") == "m.reaction" and related.get("rel_type") == "m.annotation":
            picked = choice_named(
                self._prompts.get(str(related.get("event_id")), []), str(related.get("key", ""))
            )
            return Inbound(**base, button=picked.data) if picked else None
        if event.get("type") != "m.room.message" or related.get("rel_type") == "m.replace":
            return None
        found = attachment_of(content)
        if content.get("msgtype") not in ("m.text", "m.emote") and found is None:
            # notices, what bots speak in, are never answered (no two bots talking forever); nor a
            # redacted message (no content left), a location, or a file without an mxc:// URL
            return None
        text = caption_of(content) if found else body_text(content)
        question = replied_to(content)
        if question in self._prompts and (picked := choice_named(self._prompts[question], text)):
            return Inbound(**base, button=picked.data)
        if not direct:
            said = self._addressed(content, text, room)
            if said is None:
                return None
            text = said
        return Inbound(**base, text=text, thread=thread_of(content), files=[found] if found else [])

    def _addressed(self, content: dict[str, Any], text: str, room: MatrixRoom | None) -> str | None:
        """In a room: the text, when it mentions the bot (m.mentions, its user id, `name: ...`)."""
        me = self._client().user_id
        mentions = content.get("m.mentions")
        named = [me.split(":")[0].removeprefix("@")] + ([room.user_name(me) or ""] if room else [])
        for name in filter(None, named):
            if (said := addressed(text, name)) is not None:
                return said
        if me in text:
            return text.replace(me, "").strip()
        if isinstance(mentions, dict) and me in (mentions.get("user_ids") or []):
            return text
        return None

    async def _send(self, chat: str, content: dict[str, Any], kind: str = "m.room.message") -> str:
        sent = _check(await _call(self._client().room_send(chat, kind, content)), "sending")
        return str(sent.event_id)

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        event_id = await self._send(chat, message_content(with_choices(text, buttons), thread))
        if buttons:
            self._prompts[event_id] = buttons
            for key in reaction_keys(buttons):  # there to tap
                relation = {"rel_type": "m.annotation", "event_id": event_id, "key": key}
                await self._send(chat, {"m.relates_to": relation}, "m.reaction")
        return event_id

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        if not buttons:
            self._prompts.pop(message_id, None)  # answered: reactions on it choose nothing now
        await self._send(chat, edit_content(message_id, with_choices(text, buttons)))

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        size = path.stat().st_size
        answer, _ = await _call(
            self._client().upload(lambda *_: path, content_type=mime, filename=path.name, filesize=size)
        )
        uploaded = _check(answer, "uploading")
        return await self._send(
            chat, file_content(path.name, uploaded.content_uri, mime, size, caption, thread)
        )

    async def fetch(self, attachment: Attachment) -> bytes:
        answer = _check(await _call(self._client().download(mxc=attachment.ref)), "downloading")
        body = getattr(answer, "body", None)
        if not isinstance(body, bytes):
            raise AdapterError(f"Matrix: {attachment.ref} did not download into memory")
        return body

    async def typing(self, chat: str, *, thread: str | None = None) -> None:
        if self.client is not None:
            try:
                await _call(self.client.room_typing(chat, True, timeout=30000))
            except ConnectionLost as exc:
                log.info("typing in %s: %s", chat, exc)


async def _call(call: Awaitable[T]) -> T:
    """A nio call with a lost connection (nio's own retries off) in the gateway's terms."""
    try:
        return await call
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise ConnectionLost(f"Matrix: the homeserver cannot be reached: {exc}") from exc


def _check(answer: Any, what: str) -> Any:
    """A nio response, or its error response in the gateway's terms: a 429 to wait out, a refusal of
    the credentials or of the call (a Matrix error code), else (a 5xx) a server to reconnect to."""
    if not isinstance(answer, ErrorResponse):
        return answer
    code = answer.status_code
    if code == "M_LIMIT_EXCEEDED":
        raise RateLimited(max((answer.retry_after_ms or 1000) / 1000, 0.1))
    if code and code.startswith("M_") and code != "M_UNKNOWN":  # M_UNKNOWN: Synapse's own 500
        raise AdapterError(f"Matrix refused {what}: {code} {answer.message}")
    raise ConnectionLost(f"Matrix: {what} failed: {answer}")
