"""An A2A context's session (api/a2a_tasks.py): bound once, the same live session after, looked up in
the database only when this server does not hold it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from served_app import scripted_profiles

from control_plane.api.a2a_tasks import _begin
from control_plane.api.profiles import Profile


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
