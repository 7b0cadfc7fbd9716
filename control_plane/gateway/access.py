"""Who may talk to the agent: deny by default. Allowlisted users and chats, users admitted by a
pairing code (`hermetic gateway pair CODE`), and the codes themselves: one-time, expiring, one per
user per lifetime, and only a few pending at once."""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import Literal

from ..config.chat import ChatAccess
from .base import Inbound
from .records import GatewayStore, PairingRecord

log = logging.getLogger("hermetic.gateway.access")
ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
"""No 0/O or 1/I: a code is read off a phone and typed into a terminal."""
CODE_LENGTH = 8
MAX_PENDING = 20
"""Pending codes at once; beyond it unknown users get nothing (a flood cannot grow the table)."""


@dataclass
class Decision:
    verdict: Literal["allow", "pair", "refuse"]
    code: str | None = None
    """With "pair": the code to tell the user."""


def decide(store: GatewayStore, config: ChatAccess, message: Inbound, pairing_ttl: float) -> Decision:
    """Whether to answer `message`; every refusal is logged (and never explained to the sender)."""
    where = f"{message.platform} chat {message.chat} user {message.user}"
    if not message.direct:
        if message.chat in config.allow_chats:
            return Decision("allow")
        log.warning("refused %s: the group chat is not in allow_chats", where)
        return Decision("refuse")
    if message.user in config.allow_users or store.admitted(message.platform, message.user):
        return Decision("allow")
    if not config.pairing:
        log.warning("refused %s: not in allow_users (pairing is off)", where)
        return Decision("refuse")
    if store.pairing_for(message.platform, message.user) is not None:
        log.warning("refused %s: not admitted yet; a pairing code was already given", where)
        return Decision("refuse")
    if store.pending_codes() >= MAX_PENDING:
        log.warning("refused %s: %d pairing codes are pending already", where, MAX_PENDING)
        return Decision("refuse")
    code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
    now = time.time()
    store.add_pairing(
        PairingRecord(
            code=code,
            platform=message.platform,
            user=message.user,
            name=message.user_name,
            created_at=now,
            expires_at=now + pairing_ttl,
        )
    )
    log.warning("unknown %s (%s) was given a pairing code", where, message.user_name or "no name")
    return Decision("pair", code)


def pairing_text(code: str, ttl: float) -> str:
    return (
        f"I don't know you yet. To let you in, my owner runs:\n\nhermetic gateway pair {code}\n\n"
        f"The code works once, for {ttl / 60:.0f} minutes."
    )
