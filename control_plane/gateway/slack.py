"""Slack through slack_sdk: Socket Mode in (its aiohttp client), the Web API out (AsyncWebClient).

Socket Mode rather than the Events API: a self-hosted agent often has no public HTTPS address, and
Socket Mode needs none (the gateway dials out to Slack's WebSocket). Each envelope is acknowledged
(`envelope_id` sent back) only after the gateway stored it; Slack redelivers what is not
acknowledged, and the stored message id (the event's `ts`) recognises the redelivery. Slack retries
for a few minutes only, so each new connection (its `hello`) also reads what was missed from the
chats' history (conversations.history, conversations.replies for threads; backfill.py).

A file a user shares comes in the message event (subtype `file_share`) as file objects; its
`url_private_download` is fetched with the bot token as the bearer, only from Slack's own hosts (the Web
API's host and its subdomains, files.slack.com) and without following redirects, so the token goes
nowhere else. Where the event carries only the file's id (`file_access: check_file_info`, as in Slack
Connect channels), files.info gives the rest.

slack_sdk rather than slack_bolt: Bolt acknowledges on its own schedule and adds routing we do not
use; slack_sdk is the layer Bolt is built on, kept by Slack.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from markdown_to_mrkdwn import SlackMarkdownConverter
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from ..config.chat import SlackSettings
from .backfill import catch_up
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound, RateLimited
from .files import TooLarge, download
from .records import GatewayStore

SECTION_LIMIT = 3000
"""Characters of text one section block may hold."""
PAGE = 200
"""Messages of a thread read back at once (Slack's advised most for one conversations.replies page)."""
_MRKDWN = SlackMarkdownConverter()


class SlackAdapter(Adapter):
    platform = "slack"
    text_limit = SECTION_LIMIT

    def __init__(self, settings: SlackSettings, store: GatewayStore) -> None:
        self.settings = settings
        self.store = store
        app_token = settings.app_token.get_secret_value()
        self._name = "slack:" + hashlib.sha256(app_token.encode()).hexdigest()[:16]
        self.web = AsyncWebClient(token=settings.bot_token.get_secret_value(), base_url=settings.base_url)
        self._app_token = app_token
        self._socket: SocketModeClient | None = None
        self._bot_user: str | None = None

    @property
    def lock_name(self) -> str:
        return self._name

    async def connect(self) -> None:
        identity = await _call(self.web.auth_test())
        self._bot_user = identity.get("user_id")

    async def disconnect(self) -> None:
        if self._socket is not None:
            await self._socket.close()
            self._socket = None

    async def receive(self, deliver: Deliver) -> None:
        socket = self._socket = SocketModeClient(app_token=self._app_token, web_client=self.web)

        async def on_request(client: SocketModeClient, request: SocketModeRequest) -> None:
            message = self._inbound(request)
            if message is not None:
                await deliver(message)  # stored: now Slack may forget it
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))

        async def on_message(client: SocketModeClient, message: dict[str, Any], raw: str | None) -> None:
            if message.get("type") == "hello":  # a new connection: Slack's retries may not cover the gap
                await catch_up(self.store, self.platform, self.settings, self._read_history, deliver)

        socket.socket_mode_request_listeners.append(on_request)  # type: ignore[arg-type]
        socket.message_listeners.append(on_message)  # type: ignore[arg-type]
        try:
            await socket.connect()
        except (SlackApiError, aiohttp.ClientError, OSError) as exc:
            raise ConnectionLost(f"Slack Socket Mode: {exc}") from exc
        try:
            await asyncio.Event().wait()  # slack_sdk keeps the socket up (pings, reconnects) until cancelled
        finally:
            await socket.close()
            self._socket = None

    def _inbound(self, request: SocketModeRequest) -> Inbound | None:
        payload: dict[str, Any] = request.payload or {}
        if request.type == "interactive" and payload.get("type") == "block_actions":
            action = (payload.get("actions") or [{}])[0]
            return Inbound(
                platform=self.platform,
                chat=str((payload.get("channel") or {}).get("id", "")),
                message_id=f"act{action.get('action_ts', request.envelope_id)}",
                user=str((payload.get("user") or {}).get("id", "")),
                direct=str((payload.get("channel") or {}).get("id", "")).startswith("D"),
                button=str(action.get("value", "")),
            )
        event = payload.get("event") or {}
        if request.type != "events_api":
            return None
        return self._message(event, str(event.get("channel", "")))

    def _message(self, event: dict[str, Any], chat: str) -> Inbound | None:
        """A user's message event (or history entry) in `chat`; None for anything else."""
        if event.get("type") != "message" or not event.get("ts"):
            return None
        if event.get("subtype") not in (None, "file_share") or event.get("bot_id"):
            return None  # edits, joins, bots'
        if event.get("user") == self._bot_user:
            return None  # the bot's own messages
        # a tombstone: a file deleted since
        files = [f for f in event.get("files") or [] if f.get("id") and f.get("mode") != "tombstone"]
        return Inbound(
            platform=self.platform,
            chat=chat,
            message_id=str(event["ts"]),
            user=str(event.get("user", "")),
            text=str(event.get("text", "")),
            direct=event.get("channel_type") == "im",
            thread=event.get("thread_ts"),
            files=[
                Attachment(
                    name=str(f.get("name") or f["id"]),
                    ref=str(f.get("url_private_download") or f["id"]),  # only the id: files.info has it
                    size=f.get("size"),
                )
                for f in files
            ],
        )

    async def _read_history(self, seen: Inbound, since: float, limit: int) -> list[Inbound]:
        """The newest `limit` users' messages of the chat (or its thread) after `seen` and `since`,
        oldest first."""
        oldest = max(_position(seen), since)
        after = f"{oldest:.6f}"
        if seen.thread:  # the parent, then the replies oldest first (the bot's too): one full page
            call = self.web.conversations_replies(channel=seen.chat, ts=seen.thread, oldest=after, limit=PAGE)
            entries = list((await _call(call)).get("messages") or [])
        else:  # newest first
            call = self.web.conversations_history(channel=seen.chat, oldest=after, limit=limit)
            entries = list((await _call(call)).get("messages") or [])[::-1]
        later = [e for e in entries if float(e.get("ts") or 0) > oldest]
        return [m for e in later if (m := self._message(e, seen.chat)) is not None][-limit:]

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        sent = await _call(
            self.web.chat_postMessage(
                channel=chat, text=text, thread_ts=thread, blocks=_blocks(text, buttons)
            )
        )
        return str(sent["ts"])

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        await _call(
            self.web.chat_update(channel=chat, ts=message_id, text=text, blocks=_blocks(text, buttons))
        )

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        done = await _call(
            self.web.files_upload_v2(
                channel=chat,
                file=str(path),
                filename=path.name,
                initial_comment=caption or None,
                thread_ts=thread,
            )
        )
        return str((done.get("file") or {}).get("id", ""))

    async def fetch(self, attachment: Attachment) -> bytes:
        url = attachment.ref
        if not url.startswith(("https://", "http://")):
            found = (await _call(self.web.files_info(file=attachment.ref))).get("file") or {}
            if int(found.get("size") or 0) > self.settings.max_file_bytes:
                raise TooLarge(attachment.name, self.settings.max_file_bytes)
            url = str(found.get("url_private_download") or "")
        if not self._slacks(url):
            raise AdapterError(f"the file's address is not Slack's: {url[:200] or 'none'}")
        token = self.settings.bot_token.get_secret_value()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            return await download(
                session, url, self.settings.max_file_bytes, attachment.name,
                headers={"Authorization": f"Bearer {token}"},
            )  # fmt: skip

    def _slacks(self, url: str) -> bool:
        """Whether `url` is on Slack's own hosts (the Web API's and its subdomains): the only place the
        bot token is sent."""
        api, there = urlsplit(self.settings.base_url), urlsplit(url)
        host, api_host = there.hostname or "", api.hostname or ""
        return (
            there.scheme == api.scheme
            and (host == api_host or host.endswith("." + api_host))
            and there.port == api.port
        )


def _position(seen: Inbound) -> float:
    """Where a stored message sits in its chat's history: its `ts`, or for a button press the
    `action_ts` in its id (`act<action_ts>`); 0 when a press had none (the store knows what is read
    again)."""
    try:
        return float(seen.message_id.removeprefix("act"))
    except ValueError:
        return 0.0


async def _call(call: Any) -> Any:
    """A Web API call with its errors in the gateway's terms."""
    try:
        return await call
    except SlackApiError as exc:
        response = exc.response
        if response.status_code == 429:
            raise RateLimited(float(response.headers.get("Retry-After", "1"))) from exc
        if response.status_code >= 500:
            raise ConnectionLost(f"Slack answered {response.status_code}") from exc
        error = response.data.get("error") if isinstance(response.data, dict) else None  # a non-JSON body
        raise AdapterError(f"Slack refused: {error or response.status_code}") from exc
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise ConnectionLost(f"Slack unreachable: {exc}") from exc


def _blocks(text: str, buttons: list[Button] | None) -> list[dict[str, Any]]:
    """The message as Block Kit: the model's Markdown as mrkdwn (markdown-to-mrkdwn) in a section,
    the buttons in an actions block."""
    mrkdwn = _MRKDWN.convert(text) if text else " "
    if len(mrkdwn) > SECTION_LIMIT:  # conversion can lengthen links: the part was cut for the source
        mrkdwn = text
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": mrkdwn}}]
    if buttons:
        elements = [
            {
                "type": "button",
                "text": {"type": "plain_text", "text": b.label},
                "value": b.data,
                "action_id": f"b{i}",
            }
            for i, b in enumerate(buttons)
        ]
        blocks.append({"type": "actions", "elements": elements})
    return blocks
