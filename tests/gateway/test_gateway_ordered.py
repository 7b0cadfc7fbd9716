"""Inbound messages handed on at once across chats, in order within one (gateway/ordered.py)."""

from __future__ import annotations

import asyncio

import pytest

from control_plane.gateway.ordered import NotStored, PerChat, each_in_order


def test_a_chat_waits_for_its_own_earlier_message_and_never_for_another_chats() -> None:
    async def scenario() -> list[str]:
        done: list[str] = []
        held = asyncio.Event()

        async def slow_first() -> None:
            await held.wait()  # released only once chat b is done: b did not wait for a
            done.append("a1")

        async def record(name: str) -> None:
            done.append(name)
            if name == "b1":
                held.set()

        chats = PerChat()
        chats.submit("a", slow_first)
        chats.submit("a", lambda: record("a2"))
        chats.submit("b", lambda: record("b1"))
        await asyncio.wait_for(chats.drain(), 30)
        return done

    assert asyncio.run(scenario()) == ["b1", "a1", "a2"]


def test_a_failed_message_leaves_its_chats_later_ones_alone_and_the_batch_raises_it() -> None:
    async def scenario() -> list[str]:
        done: list[str] = []

        async def fail() -> None:
            raise OSError("the store is down")

        async def record(name: str) -> None:
            done.append(name)

        with pytest.raises(OSError, match="the store is down"):
            await each_in_order([("a", fail), ("a", lambda: record("a2")), ("b", lambda: record("b1"))])
        return done

    assert asyncio.run(scenario()) == ["b1"]


def test_a_later_message_of_a_failed_chat_says_why_it_was_not_stored() -> None:
    async def scenario() -> BaseException | None:
        async def fail() -> None:
            raise OSError("the store is down")

        chats = PerChat()
        chats.submit("a", fail)
        later = chats.submit("a", lambda: asyncio.sleep(0))
        await asyncio.wait([later])
        return later.exception()

    assert isinstance(asyncio.run(scenario()), NotStored)
