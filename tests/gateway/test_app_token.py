"""The app token kept by the DingTalk, Feishu, Teams and WeCom adapters (the platforms' own token
endpoints are exercised by their stand-ins' tests)."""

from __future__ import annotations

import asyncio

from control_plane.gateway.app_token import AppToken


def test_concurrent_calls_fetch_once_and_a_stale_or_forgotten_token_is_replaced() -> None:
    fetched: list[str] = []

    async def fetch() -> tuple[str, float]:
        await asyncio.sleep(0)  # the other callers queue behind the one fetching
        fetched.append(f"t{len(fetched) + 1}")
        return fetched[-1], 7200.0

    async def scenario() -> None:
        token = AppToken(fetch)
        assert set(await asyncio.gather(*(token.get() for _ in range(10)))) == {"t1"}
        assert await token.get(stale="t1") == "t2"  # the platform refused t1
        assert await token.get(stale="t1") == "t2"  # a second caller refused with t1: already replaced
        token.forget()
        assert await token.get() == "t3"

    asyncio.run(scenario())
    assert fetched == ["t1", "t2", "t3"]


def test_a_token_is_reused_while_it_lives_and_one_that_expires_at_once_never() -> None:
    def gets(lifetime: float) -> list[str]:
        count = 0

        async def fetch() -> tuple[str, float]:
            nonlocal count
            count += 1
            return f"t{count}", lifetime

        async def three() -> list[str]:
            token = AppToken(fetch)
            return [await token.get() for _ in range(3)]

        return asyncio.run(three())

    assert gets(3600.0) == ["t1", "t1", "t1"]
    assert gets(0.0) == ["t1", "t2", "t3"]
