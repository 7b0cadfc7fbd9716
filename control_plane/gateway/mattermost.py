"""Mattermost through mattermostdriver: its WebSocket client in (`posted` events), its REST client out
(API v4: posts, patches for streaming, files), and a small HTTP listener for interactive message buttons
and custom slash commands.

The WebSocket has no acknowledgement and mattermostdriver reconnects on its own (`keepalive`); what
a dropped connection or a stopped gateway missed is read on each `hello` from the channels' posts
(GET /channels/{id}/posts?since=, backfill.py), and the stored post id recognises one seen already.

A button is an attachment action whose integration URL is this listener: the Mattermost server POSTs
`{user_id, channel_id, post_id, context}` to it when a user presses. Mattermost does not sign that
request, so the context carries an HMAC (under the bot token) of the button's data, and only data the
gateway issued is taken; the listener should be reachable by the Mattermost server only.

The Mattermost client keeps a leading `/` for its own commands, so the gateway's (/new, /stop...) come as
custom slash commands: the server POSTs each to the same listener (/commands), form-encoded with the
command's token, checked in constant time against `command_tokens`; the command is stored and routed
like a typed one, and its answer is the bot's post (the request's own response is empty).

mattermostdriver's REST client is synchronous (requests): each call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
from aiohttp import web
from mattermostdriver import Driver

from ..agent.commands import is_command
from ..config.chat import MattermostSettings
from .backfill import catch_up
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound, RateLimited
from .listener import listen
from .ordered import PerChat
from .records import GatewayStore

log = logging.getLogger("hermetic.gateway.mattermost")
T = TypeVar("T")
POST_LIMIT = 16383
"""Characters one post may hold (the server's MaxMessageSize in runes)."""


class MattermostAdapter(Adapter):
    platform = "mattermost"
    text_limit = POST_LIMIT

    def __init__(self, settings: MattermostSettings, store: GatewayStore) -> None:
        self.settings = settings
        self.store = store
        self._token = settings.token.get_secret_value()
        self._name = "mattermost:" + hashlib.sha256(f"{settings.url}|{self._token}".encode()).hexdigest()[:16]
        parts = urlsplit(settings.url)
        https = parts.scheme == "https"
        self.driver = Driver(
            {
                "url": parts.hostname or "localhost", "scheme": parts.scheme or "https",
                "port": parts.port or (443 if https else 80), "basepath": parts.path.rstrip("/") + "/api/v4",
                "token": self._token, "request_timeout": 30, "keepalive": True, "keepalive_delay": 1,
            }
        )  # fmt: skip
        self._bot_user = ""
        self._mention = ""
        self._addressed = re.compile(r"(?!)")
        """`self._mention` where it is a mention (compiled at login)."""
        self._runner: web.AppRunner | None = None
        self.actions_port: int | None = None
        """The port the button listener is on (settings.actions_port 0 picks a free one)."""

    @property
    def lock_name(self) -> str:
        return self._name

    async def connect(self) -> None:
        me = await _call(self.driver.login)
        self._bot_user, self._mention = str(me["id"]), "@" + str(me.get("username", ""))
        self._addressed = _mention(self._mention)

    async def disconnect(self) -> None:
        if self.driver.websocket is not None:
            self.driver.disconnect()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def receive(self, deliver: Deliver) -> None:
        await self._listen(deliver)
        chats = PerChat()  # posts stored at once across channels, in order within one
        failed: list[BaseException] = []

        def stored(task: asyncio.Task[bool]) -> None:
            if not task.cancelled() and (error := task.exception()) is not None:
                log.error("mattermost: a post could not be stored: %s", error)
                failed.append(error)

        async def on_event(raw: str) -> None:
            if failed:  # a post not stored: reconnect, and the new connection's backfill reads it again
                raise ConnectionLost(f"a post could not be stored: {failed.pop()}")
            event = json.loads(raw)
            if event.get("event") == "hello":  # a new connection: what it missed is in the history
                await chats.drain()  # after the posts read before, so it resumes after them
                failed.clear()
                await catch_up(self.store, self.platform, self.settings, self._read_history, deliver)
            elif event.get("event") == "posted":
                data = event.get("data") or {}
                message = self._message(json.loads(data.get("post") or "{}"), data.get("channel_type") == "D")
                if message is not None:
                    chats.submit(message.chat, partial(deliver, message)).add_done_callback(stored)

        from mattermostdriver.websocket import Websocket

        socket = self.driver.websocket = Websocket(self.driver.options, self._token)
        try:
            await socket.connect(on_event)  # reconnects by itself (keepalive) until disconnected
            await asyncio.Event().wait()
        finally:
            await chats.cancel()

    async def _listen(self, deliver: Deliver) -> None:
        """The listener the Mattermost server POSTs to: button presses, custom slash commands."""
        if self._runner is not None:
            return

        async def pressed(request: web.Request) -> web.Response:
            try:
                body = await request.json()
                context = body.get("context") or {}
                data, sig = str(context.get("data", "")), str(context.get("sig", ""))
            except (ValueError, AttributeError):
                return web.json_response({"error": "not an action request"}, status=400)
            if not hmac.compare_digest(sig, self._sign(data)):
                log.warning("refused a button press whose context the gateway did not sign")
                return web.json_response({"error": "bad signature"}, status=403)
            chat = str(body.get("channel_id", ""))
            try:  # the request does not say the channel's kind
                channel = await _call(self.driver.channels.get_channel, chat)
            except (AdapterError, ConnectionLost) as exc:
                return web.json_response({"error": str(exc)}, status=400)
            await deliver(
                Inbound(
                    platform=self.platform, chat=chat,
                    message_id=f"act:{body.get('post_id', '')}:{data}", user=str(body.get("user_id", "")),
                    user_name=str(body.get("user_name", "")), direct=channel.get("type") == "D",
                    button=data,
                )
            )  # fmt: skip
            return web.json_response({})  # stored: the gateway edits the post itself

        async def commanded(request: web.Request) -> web.Response:
            return await self._slash_command(request, deliver)

        app = web.Application(client_max_size=100_000)
        app.router.add_post("/actions", pressed)
        app.router.add_post("/commands", commanded)
        self._runner, self.actions_port = await listen(
            app, self.settings.actions_host, self.settings.actions_port
        )

    async def _slash_command(self, request: web.Request, deliver: Deliver) -> web.Response:
        """A custom slash command's request (form-encoded; its token in the form and in `Authorization:
        Token`), stored as the command it names, then answered 200 with an empty ephemeral response (which
        Mattermost shows nobody): the command's answer is the bot's post, as on every platform."""
        form = await request.post()
        token = str(form.get("token", ""))
        known = [
            hmac.compare_digest(token.encode(), t.get_secret_value().encode())
            for t in self.settings.command_tokens
        ]  # fmt: skip  (every token compared: constant time)
        if not token or not any(known):
            log.warning("refused a slash-command request whose token is not one of command_tokens")
            return web.json_response({"error": "unknown command token"}, status=401)
        trigger, words = str(form.get("command", "")).lstrip("/"), str(form.get("text", "")).split(maxsplit=1)
        if is_command(f"/{trigger}"):  # a command registered under its own name: /new, /status...
            text = f"/{trigger} {' '.join(words)}".strip()
        else:  # one command for all: /hermetic status, /hermetic model gpt-5
            text = "/" + " ".join(words).lstrip("/") if words else ""
        if not is_command(text):
            return _ephemeral(f"Not a command I know. Try /{trigger} help." if trigger else "Not a command.")
        chat = str(form.get("channel_id", ""))
        try:  # the request does not say the channel's kind
            channel = await _call(self.driver.channels.get_channel, chat)
        except (AdapterError, ConnectionLost) as exc:
            return _ephemeral(f"I cannot see this channel: {exc}")
        direct = channel.get("type") == "D"
        if direct and self._bot_user not in str(channel.get("name", "")).split("__"):
            return _ephemeral(f"Send that in your direct chat with {self._mention} or in a channel I am in.")
        stamp = int(time.time() * 1000)  # where a backfill resumes when this is the chat's last message
        await deliver(
            Inbound(
                platform=self.platform, chat=chat,
                message_id=f"cmd:{stamp}:{str(form.get('trigger_id') or '') or uuid.uuid4().hex}",
                user=str(form.get("user_id", "")), user_name=str(form.get("user_name", "")), text=text,
                direct=direct,
            )
        )  # fmt: skip
        return _ephemeral("")

    def _sign(self, data: str) -> str:
        return hmac.new(self._token.encode(), data.encode(), hashlib.sha256).hexdigest()

    def _message(self, post: dict[str, Any], direct: bool) -> Inbound | None:
        """A user's post; None for system posts, the bot's own, and channel posts not addressed to it."""
        if not post.get("id") or post.get("type") or post.get("user_id") == self._bot_user:
            return None
        text = str(post.get("message", ""))
        if (post.get("props") or {}).get("from_bot") == "true":
            return None
        if not direct:
            if not self._addressed.search(text):
                return None  # in a channel the bot answers only when addressed
            text = self._addressed.sub("", text).strip()
        files = ((post.get("metadata") or {}).get("files")) or [{"id": i} for i in post.get("file_ids") or []]
        return Inbound(
            platform=self.platform,
            chat=str(post.get("channel_id", "")),
            message_id=str(post["id"]),
            user=str(post.get("user_id", "")),
            text=text,
            direct=direct,
            thread=post.get("root_id") or None,
            files=[Attachment(name=f.get("name") or f["id"], ref=f["id"], size=f.get("size")) for f in files],
        )

    async def _read_history(self, seen: Inbound, since: float, limit: int) -> list[Inbound]:
        """The newest `limit` users' posts of the chat (or its thread) after `seen` and `since`, oldest
        first."""
        kind, _, rest = seen.message_id.partition(":")
        if kind == "cmd":  # a slash command: no post, its time (less a minute of clock skew: ids dedupe)
            after = int(rest.split(":")[0]) - 60_000
        else:
            anchor = rest.split(":")[0] if seen.button else seen.message_id  # a press: its post
            after = int((await _call(self.driver.posts.get_post, anchor)).get("create_at", 0))
        oldest = max(after, int(since * 1000))
        page = await _call(self.driver.posts.get_posts_for_channel, seen.chat, {"since": oldest})
        posts = sorted((page.get("posts") or {}).values(), key=lambda p: int(p.get("create_at", 0)))
        later = [
            p for p in posts
            if int(p.get("create_at", 0)) > oldest and not p.get("delete_at")
            and (p.get("root_id") or None) == seen.thread
        ]  # fmt: skip
        return [m for p in later if (m := self._message(p, seen.direct)) is not None][-limit:]

    def _props(self, buttons: list[Button] | None) -> dict[str, Any]:
        """The buttons as one message attachment with an action each (none: no attachments)."""
        if not buttons:
            return {"attachments": []}
        url = self.settings.actions_url or (
            f"http://{self.settings.actions_host}:{self.actions_port or self.settings.actions_port}/actions"
        )
        actions = [
            {
                "id": f"b{i}",
                "name": b.label,
                "integration": {"url": url, "context": {"data": b.data, "sig": self._sign(b.data)}},
            }
            for i, b in enumerate(buttons)
        ]
        return {"attachments": [{"actions": actions}]}

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        post = {"channel_id": chat, "message": text, "root_id": thread or "", "props": self._props(buttons)}
        return str((await _call(self.driver.posts.create_post, post))["id"])

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        patch = {"message": text, "props": self._props(buttons)}
        await _call(self.driver.posts.patch_post, message_id, patch)

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        def upload() -> Any:
            with path.open("rb") as handle:
                return self.driver.files.upload_file(chat, {"files": (path.name, handle)})

        uploaded = await _call(upload)
        ids = [info["id"] for info in uploaded.get("file_infos") or []]
        post = {"channel_id": chat, "message": caption, "root_id": thread or "", "file_ids": ids}
        return str((await _call(self.driver.posts.create_post, post))["id"])

    async def fetch(self, attachment: Attachment) -> bytes:
        response = await _call(self.driver.files.get_file, attachment.ref)
        return bytes(response.content)


def _mention(handle: str) -> re.Pattern[str]:
    """`@name` as Mattermost reads a mention: not part of a longer name (`@name-ci`, `@name.bot`), while a
    trailing dot, comma or colon is punctuation (`thanks @name.`)."""
    return re.compile(rf"(?<![\w@]){re.escape(handle)}(?![\w-]|\.\w)")


def _ephemeral(text: str) -> web.Response:
    """A slash command's response, for the user who sent it only (empty text: none is shown)."""
    return web.json_response({"response_type": "ephemeral", "text": text})


_REST = ThreadPoolExecutor(max_workers=16, thread_name_prefix="mattermost-rest")
"""The REST calls' own threads: on asyncio's default executor they would queue behind, and delay, the
store's writes of inbound messages."""


async def _call(call: Callable[..., T], *args: Any) -> T:
    """A REST call (in a worker thread) with its errors in the gateway's terms."""
    try:
        return await asyncio.get_running_loop().run_in_executor(_REST, call, *args)
    except requests.HTTPError as exc:
        response = exc.response  # None for mattermostdriver's own 400/401/403/404 classes
        status = response.status_code if response is not None else 0
        if status == 429:
            reset = response.headers.get("X-Ratelimit-Reset", "1") if response is not None else "1"
            raise RateLimited(max(float(reset), 0.1)) from exc
        if status >= 500:
            raise ConnectionLost(f"Mattermost answered {status}") from exc
        raise AdapterError(f"Mattermost refused: {exc}") from exc
    except (requests.ConnectionError, requests.Timeout, OSError) as exc:
        raise ConnectionLost(f"Mattermost unreachable: {exc}") from exc
