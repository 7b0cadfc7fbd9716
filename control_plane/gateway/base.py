"""The one interface every chat platform's adapter implements, and the platform-neutral message it
turns each inbound update into. Everything else (sessions, access, streaming, splitting, retries) is
the gateway's (gateway.py), the same for every platform."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel


class Attachment(BaseModel):
    """A file the user sent; `ref` is what the adapter's `fetch` needs to download it."""

    name: str
    ref: str
    size: int | None = None


class Inbound(BaseModel):
    """One message (or button press) from a platform, as the gateway sees every platform's."""

    platform: str
    chat: str
    message_id: str
    """The platform's id for it: a redelivery carries the same one."""
    user: str
    user_name: str = ""
    text: str = ""
    direct: bool = True
    """A one-to-one chat with the bot (else a group or channel)."""
    thread: str | None = None
    files: list[Attachment] = []
    button: str | None = None
    """The data of a pressed button (then `text` is empty)."""
    reply_url: str | None = None
    """Where a reply may be posted: the generic webhook's callback URL (None: in the HTTP response), a
    WeCom robot message's response_url."""


class Button(BaseModel):
    label: str
    data: str
    tone: Literal["neutral", "approve", "deny"] = "neutral"
    """How the platform may colour it, where it can (an approval's yes and no)."""


Deliver = Callable[[Inbound], Awaitable[bool]]
"""Stores the message; False when it was stored before (a redelivery)."""


class AdapterError(Exception):
    """A platform refused a call (bad request, forbidden); retrying the same call will not help."""


class RateLimited(AdapterError):
    """The platform said to wait (HTTP 429 with retry_after)."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"rate limited: retry after {retry_after} s")
        self.retry_after = retry_after


class ConnectionLost(Exception):
    """The platform cannot be reached (network error, 5xx): the gateway reconnects with backoff."""


class Adapter(ABC):
    """One platform. `receive` calls `deliver` for each update and acknowledges it to the platform only
    after `deliver` returned (the gateway has stored it by then)."""

    platform: str
    text_limit: int
    """Most characters one message may hold, as `length` counts them."""
    streams: bool = True
    """Replies stream by editing one message (False: one message when the reply is done)."""
    buttons: bool = True
    """Buttons can be shown (False: a question's choices are listed and answered by a reply)."""

    def buttons_in(self, message: Inbound) -> bool:
        """Whether buttons can be shown in `message`'s chat (a platform may have none in groups)."""
        return self.buttons

    replies_answer: bool = False
    """A reply answers an open question that has buttons too (its choices are listed as well)."""
    authenticates: bool = False
    """Every request is signed by a trusted caller (the webhook): no allowlist or pairing applies."""

    @staticmethod
    def length(text: str) -> int:
        """How the platform counts a message's length (Telegram: UTF-16 code units)."""
        return len(text)

    @property
    def lock_name(self) -> str | None:
        """A name unique to this bot's credentials: one gateway per bot token (None: no such limit)."""
        return None

    @abstractmethod
    async def connect(self) -> None:
        """Log in and check the credentials. Raises ConnectionLost, AdapterError (bad token)."""

    @abstractmethod
    async def disconnect(self) -> None: ...

    @abstractmethod
    async def receive(self, deliver: Deliver) -> None:
        """Deliver updates until cancelled. Raises ConnectionLost when the platform drops away."""

    @abstractmethod
    async def send(
        self, chat: str, text: str, *, thread: str | None = None, buttons: list[Button] | None = None
    ) -> str:
        """Post a message; its platform id. Raises RateLimited, AdapterError, ConnectionLost."""

    @abstractmethod
    async def edit(
        self, chat: str, message_id: str, text: str, *, buttons: list[Button] | None = None
    ) -> None:
        """Replace a message's text (and its buttons: none removes them). Raises as `send`."""

    @abstractmethod
    async def send_file(self, chat: str, path: Path, *, thread: str | None = None, caption: str = "") -> str:
        """Post a file from the host; its message id. Raises as `send`."""

    @abstractmethod
    async def fetch(self, attachment: Attachment) -> bytes:
        """Download a file the user sent. Raises AdapterError, ConnectionLost."""

    async def finished(self, chat: str, message_ids: list[str]) -> None:  # noqa: B027 (optional)
        """A reply's messages hold their final text, nothing more is edited: for a platform whose
        streamed message must be closed (WeCom's robot). Raises as `send`."""

    async def typing(self, chat: str, *, thread: str | None = None) -> None:  # noqa: B027 (optional)
        """Show that a reply is being written, where the platform has that (best effort)."""

    async def settle_press(self, press: Inbound, note: str | None) -> None:  # noqa: B027 (optional)
        """A button press was handled, for a platform that must answer each press: `note` is why it
        changed nothing, for the presser's eyes only; None: acknowledge it silently (it took effect, and
        the question's message is edited; or the presser was refused, which is never explained)."""
