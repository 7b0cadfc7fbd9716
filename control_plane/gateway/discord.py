"""Discord through discord.py: the gateway WebSocket in (discord.py keeps it up: heartbeats, resume,
reconnect), the REST API out. The REST base is discord.py's `Route.BASE`; the WebSocket URL comes
from GET /gateway/bot (set as discord.py's default gateway), so a local stand-in can serve both.

The Discord gateway has no acknowledgement: an event is delivered once per session, and a RESUME
replays what a dropped connection missed. The gateway stores each message before answering it, so
a replayed one is recognised by its id. What a new session cannot replay (sent while the gateway was
down, or before a failed RESUME) is read on each READY from the channels' history (backfill.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

import aiohttp
import discord
import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route

from ..config.chat import DiscordSettings
from .backfill import catch_up
from .base import Adapter, AdapterError, Attachment, Button, ConnectionLost, Deliver, Inbound, RateLimited
from .records import GatewayStore

T = TypeVar("T")


class DiscordAdapter(Adapter):
    platform = "discord"
    text_limit = 2000
    buttons = False
    """Approval choices are answered by replying with one (components need an interactions endpoint)."""

    def __init__(self, settings: DiscordSettings, store: GatewayStore) -> None:
        self.settings = settings
        self.store = store
        self._token = settings.token.get_secret_value()
        self._name = "discord:" + hashlib.sha256(self._token.encode()).hexdigest()[:16]
        Route.BASE = settings.api_base.rstrip("/")  # discord.py's one setting for where the API is
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = intents.message_content = True
        self.client = discord.Client(intents=intents)

    @property
    def lock_name(self) -> str:
        return self._name

    async def connect(self) -> None:
        try:
            if self.client.user is None:
                await self.client.login(self._token)  # GET /users/@me
            # discord.py's Client dials a fixed default gateway URL (and again on every fresh identify):
            # point it at the one the configured API names, as Discord asks bots to
            _, url, _ = await self.client.http.get_bot_gateway()
            DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(url)
        except discord.LoginFailure as exc:
            raise AdapterError(f"Discord refused the token: {exc}") from exc
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            raise ConnectionLost(f"Discord unreachable: {exc}") from exc

    async def disconnect(self) -> None:
        await self.client.close()

    async def receive(self, deliver: Deliver) -> None:
        async def on_message(message: discord.Message) -> None:
            if self._from_a_user(message):
                await deliver(_inbound(message))

        async def on_connect() -> None:  # a new session (READY), not a RESUME
            await catch_up(self.store, self.platform, self.settings, self._read_history, deliver)

        self.client.event(on_message)
        self.client.event(on_connect)
        try:
            await self.client.connect(reconnect=True)  # returns when closed
        except (discord.GatewayNotFound, discord.ConnectionClosed, aiohttp.ClientError, OSError) as exc:
            raise ConnectionLost(f"Discord gateway: {exc}") from exc
        await asyncio.Event().wait()  # closed from elsewhere: wait to be cancelled

    def _from_a_user(self, message: discord.Message) -> bool:
        return not message.author.bot and not (self.client.user and message.author.id == self.client.user.id)

    async def _read_history(self, seen: Inbound, since: float, limit: int) -> list[Inbound]:
        """The newest `limit` users' messages of the channel after `seen` and `since`, oldest first."""
        channel = self.client.get_partial_messageable(int(seen.thread or seen.chat))
        oldest = discord.utils.time_snowflake(datetime.datetime.fromtimestamp(since, datetime.UTC), high=True)
        after = discord.Object(max(int(seen.message_id), oldest))

        async def newest_first() -> list[discord.Message]:  # from the `before` end: the newest `limit`
            return [m async for m in channel.history(limit=limit, after=after, oldest_first=False)]

        return [_inbound(m) for m in reversed(await _call(newest_first())) if self._from_a_user(m)]

    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        channel = self.client.get_partial_messageable(int(thread or chat))
        sent = await _call(channel.send(text))
        return str(sent.id)

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        channel = self.client.get_partial_messageable(int(chat))
        await _call(channel.get_partial_message(int(message_id)).edit(content=text))

    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        channel = self.client.get_partial_messageable(int(thread or chat))
        sent = await _call(channel.send(caption or None, file=discord.File(path)))
        return str(sent.id)

    async def fetch(self, attachment: Attachment) -> bytes:
        return await _call(self.client.http.get_from_cdn(attachment.ref))

    async def typing(self, chat: str, *, thread: str | None = None) -> None:
        with contextlib.suppress(discord.HTTPException):  # cosmetic
            await self.client.http.send_typing(int(thread or chat))


async def _call(call: Awaitable[T]) -> T:
    """A REST call with its errors in the gateway's terms (discord.py waits out 429s itself)."""
    try:
        return await call
    except discord.RateLimited as exc:
        raise RateLimited(exc.retry_after) from exc
    except (discord.Forbidden, discord.NotFound) as exc:
        raise AdapterError(f"Discord refused: {exc.text}") from exc
    except discord.DiscordServerError as exc:
        raise ConnectionLost(f"Discord answered {exc.status}") from exc
    except discord.HTTPException as exc:
        raise AdapterError(f"Discord refused: {exc.status} {exc.text}") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise ConnectionLost(f"Discord unreachable: {exc}") from exc


def _inbound(message: discord.Message) -> Inbound:
    thread = str(message.channel.id) if isinstance(message.channel, discord.Thread) else None
    chat = (
        str(message.channel.parent_id)
        if isinstance(message.channel, discord.Thread)
        else str(message.channel.id)
    )
    return Inbound(
        platform="discord",
        chat=chat,
        message_id=str(message.id),
        user=str(message.author.id),
        user_name=message.author.display_name,
        text=message.content,
        direct=isinstance(message.channel, discord.DMChannel),  # not `guild is None`: an uncached guild
        thread=thread,
        files=[Attachment(name=a.filename, ref=a.url, size=a.size) for a in message.attachments],
    )
