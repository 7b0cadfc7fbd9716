"""An A2A context's session (api/a2a_tasks.py): bound once, the same live session after, looked up in
the database only when this server does not hold it; and a live session's followers (api/profiles.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from served_app import scripted_profiles

from control_plane.api.a2a_tasks import _begin
from control_plane.api.profiles import KEPT_EVENTS, LiveSession, Profile
from control_plane.events import TextDelta


@pytest.fixture
def profile(tmp_path: Path) -> Iterator[Profile]:
    profile = Profile(scripted_profiles(tmp_path, "http://127.0.0.1:9", learning={"enabled": False})("a"))
    yield profile
    profile.close()


def test_a_context_is_one_session_and_a_deleted_one_not_held_is_replaced(profile: Profile) -> None:
    async def begin(context: str) -> str:  # on a loop, as the executor calls it (LiveSession needs one)
        live, before = await asyncio.to_thread(_begin, profile, context)
        assert before == {}  # no sandbox yet: nothing listed
        return live.conversation.id

    first = asyncio.run(begin("ctx-1"))
    assert asyncio.run(begin("ctx-1")) == first  # held live: the same session
    assert asyncio.run(begin("ctx-2")) != first
    assert profile.agent.store.delete_session(first, profile.settings.profile)
    assert asyncio.run(begin("ctx-1")) == first  # still held by this server: it goes on there
    profile.live.pop(first)
    again = asyncio.run(begin("ctx-1"))  # not held and gone from the database: a new session, bound
    assert again != first and asyncio.run(begin("ctx-1")) == again
    assert profile.agent.store.get_session(again, profile.settings.profile) is not None


def test_a_follower_gets_the_events_after_its_number_in_order_from_a_full_deque(profile: Profile) -> None:
    """A live session keeps the last KEPT_EVENTS; a follower from any number gets what came after it
    (from the oldest kept when it is further back), then each new one as it is published."""

    async def follow() -> tuple[list[int], list[int], list[int]]:
        live = LiveSession(profile.agent.new_conversation(source="a2a"))
        for n in range(KEPT_EVENTS + 50):
            live.publish(TextDelta(text=str(n)))
        late = live.follow(live.seq - 3)
        got = [(await anext(late))[0] for _ in range(3)]
        behind = live.follow(10)  # further back than kept: from the oldest kept
        oldest = [(await anext(behind))[0] for _ in range(2)]
        waiting = asyncio.ensure_future(anext(late))
        await asyncio.sleep(0)
        assert not waiting.done()  # caught up: it waits for the next one
        live.publish(TextDelta(text="new"))
        seq, event = await waiting
        assert isinstance(event, TextDelta) and event.text == "new"
        return got, oldest, [seq]

    got, oldest, new = asyncio.run(follow())
    assert got == [KEPT_EVENTS + 48, KEPT_EVENTS + 49, KEPT_EVENTS + 50]
    assert oldest == [51, 52] and new == [KEPT_EVENTS + 51]
