"""Discord through discord.py: the gateway WebSocket in (discord.py keeps it up: heartbeats, resume,
reconnect), the REST API out. The REST base is discord.py's `Route.BASE`; the WebSocket URL comes
from GET /gateway/bot (set as discord.py's default gateway), so a local stand-in can serve both.

The Discord gateway has no acknowledgement: an event is delivered once per session, and a RESUME
replays what a dropped connection missed. The gateway stores each message before answering it, so
a replayed one is recognised by its id. What a new session cannot replay (sent while the gateway was
down, or before a failed RESUME) is read on each READY from the channels' history (backfill.py).

Questions come with buttons (message components). A press arrives as INTERACTION_CREATE over the same
WebSocket and is delivered like a message (its id: the interaction's); Discord wants each interaction
answered within 3 seconds at POST /interactions/{id}/{token}/callback, so the adapter waits for the
gateway to settle the press (`settle_press`): DEFERRED_UPDATE_MESSAGE when it took effect (the gateway
then edits the question, which removes its buttons) or was refused, else an ephemeral message saying
why it changed nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import logging
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
log = logging.getLogger("hermetic.gateway.discord")
ANSWER_WITHIN = 2.5
"""Seconds from a press's arrival for the gateway to settle it, else it is acknowledged silently
(Discord takes the first answer within 3 seconds of the press)."""
STYLES = {"neutral": discord.ButtonStyle.secondary, "approve": discord.ButtonStyle.success,
          "deny": discord.ButtonStyle.danger}  # fmt: skip


class DiscordAdapter(Adapter):
    platform = "discord"
    text_limit = 2000
    replies_answer = True
    """Buttons, and a reply with the choice as before them (a client that shows no components)."""

    def __init__(self, settings: DiscordSettings, store: GatewayStore) -> None:
        self.settings = settings
        self.store = store
        self._token = settings.token.get_secret_value()
        self._name = "discord:" + hashlib.sha256(self._token.encode()).hexdigest()[:16]
        Route.BASE = settings.api_base.rstrip("/")  # discord.py's one setting for where the API is
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.dm_messages = intents.message_content = True
        self.client = discord.Client(intents=intents)
        self._presses: dict[str, asyncio.Future[str | None]] = {}
        """Presses delivered, by interaction id, each waiting for the gateway's `settle_press`."""

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

        async def on_interaction(interaction: discord.Interaction) -> None:
            press = _press(interaction)
            if press is not None:
                await self._answer_press(press, interaction, deliver)

        self.client.event(on_message)
        self.client.event(on_connect)
        self.client.event(on_interaction)
        try:
            await self.client.connect(reconnect=True)  # returns when closed
        except (discord.GatewayNotFound, discord.ConnectionClosed, aiohttp.ClientError, OSError) as exc:
            raise ConnectionLost(f"Discord gateway: {exc}") from exc
        await asyncio.Event().wait()  # closed from elsewhere: wait to be cancelled

    async def _answer_press(self, press: Inbound, interaction: discord.Interaction, deliver: Deliver) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ANSWER_WITHIN
        settled = self._presses[press.message_id] = loop.create_future()
        try:
            if not await deliver(press):
                return  # replayed by a RESUME: answered when it first came
            try:
                async with asyncio.timeout_at(deadline):
                    note = await settled
            except TimeoutError:
                log.warning("discord: press %s not settled in time; acknowledged", press.message_id)
                note = None
        finally:
            self._presses.pop(press.message_id, None)
        try:
            if note is None:
                await interaction.response.defer()  # type 6, DEFERRED_UPDATE_MESSAGE
            else:
                await interaction.response.send_message(note, ephemeral=True)  # type 4, flags 64
        except (discord.HTTPException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord: cannot answer interaction %s: %s", press.message_id, exc)

    async def settle_press(self, press: Inbound, note: str | None) -> None:
        settled = self._presses.get(press.message_id)
        if settled is not None and not settled.done():
            settled.set_result(note)

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
        view = _view(buttons)
        sent = await _call(channel.send(text, view=view) if view else channel.send(text))
        return str(sent.id)

    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        channel = self.client.get_partial_messageable(int(chat))
        await _call(channel.get_partial_message(int(message_id)).edit(content=text, view=_view(buttons)))

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


def _view(buttons: list[Button] | None) -> discord.ui.View | None:
    """The buttons as an action row (None: no components, which removes any)."""
    if not buttons:
        return None
    view = discord.ui.View(timeout=None)
    for button in buttons:
        view.add_item(discord.ui.Button(label=button.label, custom_id=button.data, style=STYLES[button.tone]))
    view.stop()  # presses are read from INTERACTION_CREATE: kept out of discord.py's view store
    return view


def _press(interaction: discord.Interaction) -> Inbound | None:
    """A button press as the gateway sees one; None for any other interaction."""
    data: dict[str, object] = dict(interaction.data or {})
    if interaction.type is not discord.InteractionType.component or data.get("component_type") != 2:
        return None
    channel = interaction.channel
    if channel is None:
        return None
    thread = channel if isinstance(channel, discord.Thread) else None
    return Inbound(
        platform="discord",
        chat=str(thread.parent_id if thread else channel.id),
        message_id=str(interaction.id),
        user=str(interaction.user.id),
        user_name=interaction.user.display_name,
        direct=interaction.guild_id is None,  # an interaction always names its guild
        thread=str(thread.id) if thread else None,
        button=str(data.get("custom_id", "")),
    )
