"""The generic webhook: signed POSTs in (aiohttp as the caller), the reply in the response or POSTed,
signed, to a callback URL; bad signatures and stale timestamps refused; a retried id answered once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from gateway_harness import WEBHOOK_SECRET, Running, gateway_settings, listening_port, webhook_post

from control_plane.gateway.webhook import sign
from control_plane.workers import BLOCKING_WORKERS, give_blocking_pool


def _settings(tmp_path: Path, llm_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("HM15_WEBHOOK_SECRET", WEBHOOK_SECRET.decode())
    webhook = {"secret": "${HM15_WEBHOOK_SECRET}", "port": 0, "reply_timeout": 30}
    return gateway_settings(tmp_path, llm_url, None, gateway={"webhook": webhook})


def test_a_signed_post_gets_the_reply_in_its_response_and_a_retry_is_not_answered_twice(
    tmp_path: Path, fake_llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_llm.load([{"text": "pong from the agent"}])
    with Running(_settings(tmp_path, fake_llm.url, monkeypatch)) as gateway:
        port = listening_port(gateway)
        message = {"id": "m-1", "chat": "ops", "user": "ci", "text": "ping"}
        status, body = asyncio.run(webhook_post(port, message))
        assert (status, body) == (200, {"reply": "pong from the agent"})
        status, body = asyncio.run(webhook_post(port, message))
        assert (status, body) == (200, {"status": "duplicate"})
        assert len(fake_llm.requests) == 1
        (session,) = [s for s in gateway.agent.store.list_sessions("default") if s.source == "webhook"]
        assert gateway.agent.store.history(session.id)[1]["content"] == "ping"


def test_bad_signatures_stale_timestamps_and_bad_bodies_are_refused(
    tmp_path: Path, fake_llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Running(_settings(tmp_path, fake_llm.url, monkeypatch)) as gateway:
        port = listening_port(gateway)
        message = {"id": "m-2", "chat": "ops", "text": "rm -rf"}
        assert asyncio.run(webhook_post(port, message, secret=b"guessed"))[0] == 401
        assert asyncio.run(webhook_post(port, message, skew=-3600))[0] == 401
        status, body = asyncio.run(webhook_post(port, {"chat": "ops"}))
        assert status == 400 and "not a valid message" in body["error"]
        assert fake_llm.requests == []
        assert gateway.store.last_inbound("webhook") is None, "nothing unsigned is even stored"


def test_with_a_callback_url_the_reply_is_posted_there_signed(
    tmp_path: Path, fake_llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_llm.load([{"text": "the build is green"}])
    received: list[tuple[dict[str, str], bytes]] = []
    got = asyncio.Event()

    async def main() -> None:
        async def callback(request: web.Request) -> web.Response:
            received.append((dict(request.headers), await request.read()))
            got.set()
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_post("/hook", callback)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            status, body = await webhook_post(
                webhook_port,
                {
                    "id": "m-3",
                    "chat": "ci",
                    "text": "status?",
                    "callback_url": f"http://127.0.0.1:{port}/hook",
                },
            )
            assert (status, body) == (202, {"status": "accepted"})
            await asyncio.wait_for(got.wait(), 30)
        finally:
            await runner.cleanup()

    with Running(_settings(tmp_path, fake_llm.url, monkeypatch)) as gateway:
        webhook_port = listening_port(gateway)
        asyncio.run(main())
    ((headers, raw),) = received
    assert json.loads(raw)["text"] == "the build is green"
    assert headers["X-Hermetic-Signature"] == sign(WEBHOOK_SECRET, headers["X-Hermetic-Timestamp"], raw)


def test_the_gateway_loop_runs_as_many_blocking_calls_at_once_as_chats_need(
    tmp_path: Path, fake_llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its stores, marks and bindings wait in worker threads (on SQLite's lock, mostly): twenty chats'
    calls at once must not queue behind Python's default pool of cpu_count + 4 threads (6 on two cores)."""
    at_once = 20
    assert at_once < BLOCKING_WORKERS
    barrier = threading.Barrier(at_once)

    async def all_waiting_together() -> list[int]:
        return list(await asyncio.gather(*(asyncio.to_thread(barrier.wait, 30) for _ in range(at_once))))

    running = Running(_settings(tmp_path, fake_llm.url, monkeypatch))
    with running:  # the call runs on the gateway's own event loop, started as `hermetic gateway` starts it
        assert sorted(running.call(all_waiting_together())) == list(range(at_once))  # none broke the barrier


def test_a_loop_given_the_blocking_pool_runs_that_many_waits_at_once() -> None:
    """What `hermetic serve` gives its loop at startup too (the API's lifespan)."""
    barrier = threading.Barrier(BLOCKING_WORKERS)

    async def main() -> None:
        give_blocking_pool()
        give_blocking_pool()  # once per loop: a second call keeps the pool
        await asyncio.gather(*(asyncio.to_thread(barrier.wait, 30) for _ in range(BLOCKING_WORKERS)))

    asyncio.run(main())


STARTS_A_GATEWAY = """
import asyncio, sys
from control_plane.config.settings import load_settings
from control_plane.gateway import create_gateway

async def main():
    settings = load_settings(
        root=sys.argv[1],
        model={"name": "openai/scripted", "api_base": sys.argv[2], "api_key": "test"},
        gateway={"webhook": {"secret": "0123456789abcdef0123456789abcdef", "port": 0}},
    )
    gateway = create_gateway(settings)
    before = "litellm" in sys.modules
    await gateway.start()
    try:
        print(before, "litellm" in sys.modules)
    finally:
        await gateway.stop()
        gateway.agent.close()
        gateway.store.close()

asyncio.run(main())
"""


def test_the_gateway_imports_litellm_before_its_first_message(tmp_path: Path, fake_llm: Any) -> None:
    """In a fresh interpreter: by the end of start, off the loop; the first message's turn would import it
    on the loop (its history's token count needs it), holding every chat for seconds."""
    ran = subprocess.run(
        [sys.executable, "-c", STARTS_A_GATEWAY, str(tmp_path), fake_llm.url],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("HERMETIC_")},
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["False", "True"]
