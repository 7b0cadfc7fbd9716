"""Idempotency keys of posted messages (`POST /sessions/ID/messages` with `Idempotency-Key`): a client
that could not see whether a post was taken (its connection cut, a replica gone) sends it again under the
same key, and the message is not taken twice.

A key is bound (store/bindings.py, surface "message") when its post is first seen. A post seen again is a
duplicate only if the first one was taken: a turn runs here, or the session's history holds the message
from the first post's time on. A key bound by a post whose replica died before it saved the message holds
nothing back: the message is taken now (else the client would wait for a turn that nobody runs).
"""

from __future__ import annotations

from .profiles import LiveSession, Profile

KEPT = 100_000
"""Keys remembered per profile (the least recently posted forgotten first)."""
CLOCKS = 60.0
"""Seconds a message's time may precede its key's (the replicas' clocks differ) and still be its post's."""


def _name(live: LiveSession, key: str) -> str:
    return f"{live.conversation.id}:{key}"


def seen_before(profile: Profile, live: LiveSession, key: str, content: str) -> bool:
    """Bind `key` to this post; whether a post under it was taken before (so this one is a duplicate)."""
    bindings = profile.agent.bindings
    if bindings.claim("message", _name(live, key), live.conversation.id, keep=KEPT):
        return False
    if live.running:
        return True
    bound = bindings.get("message", _name(live, key))
    since = (bound.started_at if bound is not None else 0.0) - CLOCKS
    return any(
        m.role == "user" and m.content == content and m.created_at >= since
        for m in profile.agent.store.messages(live.conversation.id)
    )


def forget(profile: Profile, live: LiveSession, key: str) -> None:
    """The post under `key` was not taken (refused over limits): the same key may be posted again."""
    profile.agent.bindings.forget("message", _name(live, key))
