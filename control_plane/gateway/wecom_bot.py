"""WeCom through an intelligent robot (智能机器人) in API mode: WeCom POSTs each message sent to the robot
in a one-to-one chat, or @-mentioning it in a group, as encrypted JSON to the gateway's own listener, and the
reply is the answer to that callback: a stream (its id is the message's msgid) whose text WeCom asks for
again and again in stream-refresh callbacks, for up to 6 minutes from the message, until one answer says
it is finished. What outlives that window, or a reply rerun after a restart, goes out once through the
message's response_url (one POST, within an hour). Developer docs: document/path/100719 (receiving),
101031 (passive replies), 101138 (response_url), 101033 (encryption).

Every callback is checked and opened by wecom_crypto.py (msg_signature, AES key, an empty receiveid)
before anything in it is read, and every passive reply is sealed the same way. A message is answered
only after it is stored; a retried msgid is recognised and answered with its stream as it stands.
Approvals are button cards sent with the message's stream (stream_with_template_card, one per message);
a press comes back as a template_card_event, answered (within WeCom's 5 s) with the card updated to show
the answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from ..config.chat import WeComBotSettings
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound
from .records import GatewayStore
from .wecom_bot_parts import Stream, answered_card, button_card, inbound
from .wecom_crypto import CallbackCipher, Refused
from .wecom_listener import open_callback, serve_callbacks

log = logging.getLogger("hermetic.gateway.wecom_bot")
TEXT_LIMIT = 20480
"""Bytes (UTF-8) of a stream's or a markdown message's content."""
RESTARTED = "(the gateway restarted: the reply follows as a message of its own)"
"""What closes a stream a gateway opened before a restart (its rerun's reply goes by response_url)."""
DONE_STATES = frozenset({"answered", "refused"})
"""A stored message in these states has had all the reply it gets."""


class WeComBotAdapter(Adapter):
    platform = "wecom_bot"
    text_limit = TEXT_LIMIT
    replies_answer = True
    """A card may not reach a group (response_url takes no card there): the choices are listed too."""

    @staticmethod
    def length(text: str) -> int:
        return len(text.encode())

    def __init__(self, settings: WeComBotSettings, store: GatewayStore) -> None:
        self.settings, self.store = settings, store
        key = settings.encoding_aes_key.get_secret_value()
        self.cipher = CallbackCipher(settings.token.get_secret_value(), key, "")
        self._streams: dict[str, Stream] = {}
        self._chats: dict[str, list[str]] = {}
        """chat -> the ids of its streams WeCom may still ask for, oldest first."""
        self._urls: dict[str, list[str]] = {}
        """chat -> response_urls heard in this run, oldest first."""
        self._used: set[str] = set()
        self._direct: set[str] = set()
        self._cards: dict[str, dict[str, Any]] = {}
        """task_id -> a sent card, until it is answered."""
        self._presses: dict[str, asyncio.Future[str]] = {}
        """task_id -> the card's new text, awaited by its press's callback."""
        self._client: httpx.AsyncClient | None = None
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    @property
    def lock_name(self) -> str:
        return f"wecom_bot:{self.settings.bot_id}"

    async def connect(self) -> None:
        """Nothing to log in to: WeCom calls the listener (no token, no connection of ours)."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=30)

    async def disconnect(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def receive(self, deliver: Deliver) -> None:
        async def callback(request: web.Request) -> web.Response:
            return await self._callback(request, deliver)

        self._runner, self.port = await serve_callbacks(self.platform, self.settings, self.cipher, callback)
        await asyncio.Event().wait()

    # -- callbacks -------------------------------------------------------------------------

    def _reply(self, request: web.Request, payload: dict[str, Any]) -> web.Response:
        """A passive reply, sealed: WeCom wants the callback's nonce back."""
        timestamp, nonce = str(int(time.time())), request.query.get("nonce", "")
        plain = json.dumps(payload, ensure_ascii=False).encode()
        encrypted, signature = self.cipher.seal(plain, timestamp, nonce)
        sealed = {"encrypt": encrypted, "msgsignature": signature, "timestamp": int(timestamp)}
        return web.json_response(sealed | {"nonce": nonce})

    async def _callback(self, request: web.Request, deliver: Deliver) -> web.Response:
        try:
            body = json.loads(await request.read())
            if not isinstance(body, dict) or not isinstance(body.get("encrypt"), str):
                raise ValueError("no encrypt field")
            message = json.loads(open_callback(self.cipher, request, body["encrypt"]))
            if not isinstance(message, dict):
                raise ValueError("the message is not a JSON object")
        except Refused as exc:
            log.warning("wecom_bot: refused a callback: %s", exc)
            return web.Response(text=str(exc), status=403)
        except ValueError as exc:
            return web.Response(text=f"not a WeCom robot callback: {exc}", status=400)
        robot = str(message.get("aibotid", ""))
        if robot and robot != self.settings.bot_id:
            log.warning("wecom_bot: a callback for robot %s, not %s: ignored", robot, self.settings.bot_id)
            return web.Response(text="")
        kind = message.get("msgtype")
        if kind == "stream":
            return await self._refresh(request, str((message.get("stream") or {}).get("id", "")))
        if kind == "event":
            return await self._event(request, message, deliver)
        item = inbound(self.platform, message, self.settings.name)
        if item is None:
            log.info("wecom_bot: a %s message is not answered", kind)
            return web.Response(text="")
        try:
            await deliver(item)
        except Exception as exc:  # not stored: WeCom retries a callback that fails
            log.error("wecom_bot: a message could not be stored: %s", exc)
            return web.Response(text="not stored", status=503)
        return self._reply(request, self._opened(item).answer(finish=False))

    def _opened(self, item: Inbound) -> Stream:
        """The message's stream (the one it had, for a retried callback)."""
        if item.direct:
            self._direct.add(item.chat)
        if item.reply_url:
            self._urls.setdefault(item.chat, []).append(item.reply_url)
        stream = self._streams.get(item.message_id)
        if stream is None or not stream.here:
            stream = Stream(item.message_id, item.chat, item.reply_url or "")
            self._streams[stream.id] = stream
            self._chats.setdefault(item.chat, []).append(stream.id)
        return stream

    async def _refresh(self, request: web.Request, stream_id: str) -> web.Response:
        """WeCom asks for a stream's text so far: finished once the reply is whole, or once the message
        turned out to get no reply of its own (folded into a running turn, an answer, refused)."""
        stream = self._streams.get(stream_id)
        if stream is None or not stream.here:
            closing = {"msgtype": "stream", "stream": {"id": stream_id, "finish": True, "content": RESTARTED}}
            return self._reply(request, closing)
        finish = stream.done or not self._live(stream)
        if not stream.claimed and not finish:
            finish = await self._answered_without_reply(stream)
        if finish:
            stream.closed = True
            self._forget(stream)
        return self._reply(request, stream.answer(finish))

    async def _event(self, request: web.Request, message: dict[str, Any], deliver: Deliver) -> web.Response:
        """A card's button pressed: stored (a press is not retried), then answered with the card showing the
        answer, when the gateway edits it within `press_wait`."""
        event = message.get("event") or {}
        press = event.get("template_card_event") if isinstance(event, dict) else None
        if not isinstance(press, dict):
            return web.Response(text="")  # enter_chat, feedback_event: nothing to answer
        user = str((message.get("from") or {}).get("userid", ""))
        group = message.get("chattype") == "group"
        chat = str(message.get("chatid", "")) if group else user
        if message.get("response_url"):
            self._urls.setdefault(chat, []).append(str(message["response_url"]))
        task = str(press.get("task_id", ""))
        item = Inbound(
            platform=self.platform, chat=chat, message_id=str(message.get("msgid", "")), user=user,
            direct=not group, button=str(press.get("event_key", "")),
        )  # fmt: skip
        waiting: asyncio.Future[str] | None = None
        if task in self._cards:
            waiting = self._presses.setdefault(task, asyncio.get_running_loop().create_future())
        try:
            await deliver(item)
            if waiting is None:
                return web.Response(text="")
            text = await asyncio.wait_for(asyncio.shield(waiting), self.settings.press_wait)
        except TimeoutError:
            return web.Response(text="")  # the question did not change (closed, or not the presser's)
        except Exception as exc:
            log.error("wecom_bot: a card press could not be stored: %s", exc)
            return web.Response(text="not stored", status=503)
        finally:
            self._presses.pop(task, None)
        card = answered_card(self._cards.pop(task), text)
        update = {"response_type": "update_template_card", "userids": [user], "template_card": card}
        return self._reply(request, update)

    # -- streams ---------------------------------------------------------------------------

    def _live(self, stream: Stream) -> bool:
        """WeCom still asks for this stream."""
        age = time.monotonic() - stream.born
        return stream.here and not stream.closed and age < self.settings.stream_window

    def _forget(self, stream: Stream) -> None:
        ids = self._chats.get(stream.chat, [])
        if stream.id in ids:
            ids.remove(stream.id)
        if stream.closed and stream.done or not stream.claimed:
            self._streams.pop(stream.id, None)

    async def _answered_without_reply(self, stream: Stream) -> bool:
        record = await asyncio.to_thread(self.store.find, self.platform, stream.chat, stream.id)
        return record is not None and record.state in DONE_STATES

    async def _current(self, chat: str, *, claimed: bool) -> Stream | None:
        """The stream a reply to `chat` goes into: the oldest live one not yet holding a reply whose message
        still waits for one (with `claimed`, the running reply's own stream comes first)."""
        streams = [self._streams[i] for i in self._chats.get(chat, []) if i in self._streams]
        live = [s for s in streams if self._live(s) and not s.done]
        if claimed:
            for stream in live:
                if stream.claimed:
                    return stream
        for stream in live:
            if not stream.claimed and not await self._answered_without_reply(stream):
                return stream
        return None

    # -- replies ---------------------------------------------------------------------------

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        if buttons:
            return await self._ask(chat, text, buttons)
        stream = await self._current(chat, claimed=False)
        if stream is None:  # no stream WeCom still asks for: goes through a response_url when finished
            stream = Stream(f"out-{uuid.uuid4().hex}", chat, here=False)
            self._streams[stream.id] = stream
        stream.claimed, stream.text = True, text
        return stream.id

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        if message_id.startswith("card:"):
            waiting = self._presses.get(message_id.removeprefix("card:"))
            if waiting is None or waiting.done():
                raise AdapterError("a WeCom robot's card changes only in the answer to its press (5 s)")
            waiting.set_result(text)
            return
        stream = self._streams.get(message_id)
        if stream is None:  # begun by the gateway before a restart: finished through the response_url
            stream = Stream(message_id, chat, here=False, claimed=True)
            self._streams[message_id] = stream
        stream.text = text

    async def finished(self, chat: str, message_ids: list[str]) -> None:
        for message_id in message_ids:
            stream = self._streams.get(message_id)
            if stream is None:
                continue
            stream.done = True
            if not self._live(stream):
                stream.closed = True
                self._forget(stream)
                await self._post(chat, {"msgtype": "markdown", "markdown": {"content": stream.text}}, stream)

    async def _ask(self, chat: str, text: str, buttons: list[Button]) -> str:
        """The buttons as a card with the running reply's stream; else through a response_url (a card in a
        one-to-one chat, the question as text in a group, where response_url takes no card)."""
        card = button_card(text, buttons)
        task = str(card["task_id"])
        self._cards[task] = card
        stream = await self._current(chat, claimed=True)
        if stream is not None and stream.card is None:
            stream.card = card
        elif chat in self._direct:
            await self._post(chat, {"msgtype": "template_card", "template_card": card})
        else:
            await self._post(chat, {"msgtype": "markdown", "markdown": {"content": text}})
        return f"card:{task}"

    async def _post(self, chat: str, body: dict[str, Any], stream: Stream | None = None) -> None:
        """One active reply through a response_url not used yet (each takes one POST, for an hour)."""
        url = await self._response_url(chat, stream)
        if url is None:
            raise AdapterError(
                f"no response_url left for {chat}: a robot answers a message once more, within an hour"
            )
        self._used.add(url)
        await self.connect()
        assert self._client is not None
        try:
            response = await self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"WeCom unreachable: {exc}") from exc
        if response.status_code >= 500:
            raise ConnectionLost(f"WeCom answered {response.status_code}")
        try:
            answer = response.json()
        except ValueError as exc:
            raise AdapterError(f"the response_url answered HTTP {response.status_code}: not JSON") from exc
        if response.status_code >= 400 or answer.get("errcode", 0):
            raise AdapterError(f"the response_url refused the reply: {answer}")

    async def _response_url(self, chat: str, stream: Stream | None) -> str | None:
        """The stream's own message's response_url; else the chat's newest unused one (from the store, for a
        message heard before a restart)."""
        wanted = [stream.response_url] if stream is not None else []
        wanted += reversed(self._urls.get(chat, []))
        if stream is not None:
            record = await asyncio.to_thread(self.store.find, self.platform, chat, stream.id)
            wanted.append(str(record.payload.get("reply_url") or "") if record else "")
        last = await asyncio.to_thread(self.store.last_inbound, self.platform, chat)
        wanted.append(str(last.payload.get("reply_url") or "") if last else "")
        return next((url for url in wanted if url and url not in self._used), None)

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        raise AdapterError("a WeCom robot in API mode sends no files (only images inside a streamed reply)")

    async def fetch(self, attachment: Attachment) -> bytes:
        """An image or file the user sent: its URL (valid 5 minutes) holds it encrypted with the AES key."""
        await self.connect()
        assert self._client is not None
        try:
            response = await self._client.get(attachment.ref)
        except httpx.HTTPError as exc:
            raise ConnectionLost(f"WeCom's file store unreachable: {exc}") from exc
        if response.status_code != 200:
            raise AdapterError(f"the file's URL answered HTTP {response.status_code} (it lives 5 minutes)")
        try:
            return self.cipher.open_file(response.content)
        except Refused as exc:
            raise AdapterError(str(exc)) from exc
