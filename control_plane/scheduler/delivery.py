"""Where a job's result goes: `KIND:ADDRESS` targets, each kind a handler in one registry.

Built in: `file:NAME` (appended to deliveries/NAME in the profile home) and `webhook:URL` (a JSON POST
signed with HMAC-SHA256). A chat platform plugs in by `register_target("telegram", handler)` from the
gateway; until one is registered in the process, its targets are accepted when a job is saved and fail,
saying so, when a result is delivered. The gateway also registers an origin resolver, so the agent's
schedule tool can deliver to the chat a conversation came from (`here`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx

from ..config.chat import PLATFORMS
from ..tls import client_tls

log = logging.getLogger(__name__)
SIGNATURE_HEADER = "X-Hermetic-Signature"
"""`sha256=` + hex HMAC-SHA256 of `TIMESTAMP.BODY` under the profile's webhook secret."""
TIMESTAMP_HEADER = "X-Hermetic-Timestamp"
WEBHOOK_TIMEOUT = 15.0
CHAT_KINDS = frozenset(PLATFORMS) - {"webhook"}
"""Gateway platforms with chats to send to: their targets are accepted before the gateway has registered a
handler (the webhook only answers requests)."""


class DeliveryError(ValueError):
    """A target that is malformed or could not be delivered to; the message says why."""


@dataclass(frozen=True)
class Message:
    """What is delivered: one finished run of a job (its reply, or why it failed)."""

    job_id: str
    job_name: str
    run_id: int
    status: str
    """ok, or failed (after the last retry)."""
    text: str
    session_id: str | None
    scheduled_for: float
    finished_at: float

    def body(self) -> bytes:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True).encode()


@dataclass(frozen=True)
class DeliveryContext:
    home: Path
    """The profile home (file targets live under its deliveries/)."""
    webhook_secret: bytes


class TargetKind(Protocol):
    """One kind of target. `check` runs when a job is saved, `send` when a run has finished."""

    def check(self, address: str) -> None:
        """Raise DeliveryError when `address` cannot be a target of this kind."""

    async def send(self, address: str, message: Message, ctx: DeliveryContext) -> str:
        """Deliver; returns a short detail for the history. Raises DeliveryError (or any exception)."""


_KINDS: dict[str, TargetKind] = {}
_ORIGINS: list[Callable[[str], str | None]] = []


def register_origin(resolver: Callable[[str], str | None]) -> None:
    """Let the schedule tool deliver back to where a conversation came from: `resolver(session_id)` gives
    the session's chat as a target ('telegram:CHAT') or None. The gateway registers one."""
    _ORIGINS.append(resolver)


def origin_of(session_id: str) -> str | None:
    """The chat a session belongs to, as a delivery target, when a registered resolver knows it."""
    return next((found for resolver in _ORIGINS if (found := resolver(session_id))), None)


def register_target(kind: str, handler: TargetKind) -> None:
    """Make `kind:ADDRESS` targets go to `handler` (a later registration replaces an earlier one)."""
    _KINDS[kind] = handler


def check_target(target: str) -> tuple[str, str]:
    """The target's kind and address, checked. Raises DeliveryError."""
    kind, sep, address = target.partition(":")
    if not sep or not address:
        raise DeliveryError(f"target {target!r}: write KIND:ADDRESS ({', '.join(known_kinds())})")
    handler = _KINDS.get(kind)
    if handler is not None:
        handler.check(address)
    elif kind not in CHAT_KINDS:
        raise DeliveryError(f"target {target!r}: unknown kind {kind!r}; known: {', '.join(known_kinds())}")
    return kind, address


def known_kinds() -> list[str]:
    return sorted(set(_KINDS) | CHAT_KINDS)


async def deliver(targets: list[str], message: Message, ctx: DeliveryContext) -> list[dict[str, Any]]:
    """Send `message` to every target: one {target, ok, detail} each; a failing one never stops the rest."""
    outcomes: list[dict[str, Any]] = []
    for target in targets:
        kind, address = target.partition(":")[::2]
        handler = _KINDS.get(kind)
        try:
            if handler is None:
                raise DeliveryError(f"no {kind} adapter is running in this process (hermetic gateway run)")
            detail = await handler.send(address, message, ctx)
            outcomes.append({"target": target, "ok": True, "detail": detail})
        except Exception as exc:  # one bad target must not lose the others' deliveries
            log.warning("job %s: delivery to %s failed: %s", message.job_id, target, exc)
            outcomes.append({"target": target, "ok": False, "detail": f"{type(exc).__name__}: {exc}"})
    return outcomes


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


class FileTarget:
    """`file:NAME`: appended as a Markdown section to deliveries/NAME in the profile home."""

    def check(self, address: str) -> None:
        path = PurePosixPath(address)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise DeliveryError(f"file target {address!r}: a relative path without '..' (under deliveries/)")

    async def send(self, address: str, message: Message, ctx: DeliveryContext) -> str:
        self.check(address)
        path = ctx.home / "deliveries" / address
        path.parent.mkdir(parents=True, exist_ok=True)
        when = dt.datetime.fromtimestamp(message.finished_at, dt.UTC).isoformat(timespec="seconds")
        section = f"## {message.job_name} ({message.job_id}) {when} {message.status}\n\n{message.text}\n\n"
        with path.open("a", encoding="utf-8") as out:
            out.write(section)
        return str(path)


class WebhookTarget:
    """`webhook:URL`: the message as JSON, POSTed with a timestamp and an HMAC signature over both."""

    def check(self, address: str) -> None:
        parts = urlsplit(address)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise DeliveryError(f"webhook target {address!r}: an http:// or https:// URL")

    async def send(self, address: str, message: Message, ctx: DeliveryContext) -> str:
        self.check(address)
        body = message.body()
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(ctx.webhook_secret, timestamp, body),
        }
        async with httpx.AsyncClient(
            timeout=WEBHOOK_TIMEOUT, follow_redirects=False, verify=client_tls()
        ) as client:
            reply = await client.post(address, content=body, headers=headers)
        if reply.status_code >= 300:
            raise DeliveryError(f"the webhook answered HTTP {reply.status_code}")
        return f"HTTP {reply.status_code}"


register_target("file", FileTarget())
register_target("webhook", WebhookTarget())
