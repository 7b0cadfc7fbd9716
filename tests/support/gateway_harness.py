"""Running the gateway in tests: settings pointing at the Telegram stand-in and the scripted model, and
the gateway on an event loop of its own thread (the stand-in has another), driven from the test."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
from conftest import get_backend
from pydantic import BaseModel
from telegram_standin import TOKEN, TelegramStandin

from control_plane.config.settings import Settings, load_settings
from control_plane.gateway import Gateway, create_gateway
from control_plane.gateway.webhook import WebhookAdapter, sign
from control_plane.tools import TOOLS, Registry, Tool, ToolContext, ToolResult

OWNER = 1001


def gateway_settings(
    root: Path,
    llm_url: str,
    standin: TelegramStandin | None,
    *,
    backend: str = "local",
    toolsets: list[str] | None = None,
    gateway: dict[str, Any] | None = None,
    **telegram: Any,
) -> Settings:
    get_backend(backend)  # skips, with the reason, when the backend cannot run here
    gateway = {"lock_ttl": 5, "reconnect_max": 0.5} | (gateway or {})
    if standin is not None:
        gateway["telegram"] = {
            "token": TOKEN,
            "base_url": standin.base_url,
            "base_file_url": standin.base_file_url,
            "allow_users": [str(OWNER)],
            "edit_interval": 0.05,
            "poll_timeout": 2,
        } | telegram
    model = {"name": "openai/scripted", "api_base": llm_url, "api_key": "test", "retries": 0}
    extra: dict[str, Any] = {"toolsets": toolsets} if toolsets else {}
    return load_settings(
        root=root, model=model, backend=backend, learning={"enabled": False}, gateway=gateway, **extra
    )


class Running:
    """`with Running(settings) as gateway:` the gateway receiving until the block ends."""

    def __init__(self, settings: Settings, registry: Registry = TOOLS) -> None:
        self.gateway: Gateway = create_gateway(settings, registry)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def call(self, coro: Any, timeout: float = 120) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def __enter__(self) -> Gateway:
        self.thread.start()
        try:
            self.call(self.gateway.start())
        except BaseException:
            self._end()
            raise
        return self.gateway

    def __exit__(self, *exc: object) -> None:
        try:
            self.call(self.gateway.stop())
        finally:
            self._end()

    def _end(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.gateway.agent.close()
        self.gateway.store.close()


def wait_answered(gateway: Gateway, count: int, timeout: float = 120) -> None:
    """Until `count` stored messages are answered (the gateway marks them after the final edit)."""
    from sqlalchemy import func, select

    from control_plane.gateway.records import InboundRecord

    deadline = time.monotonic() + timeout
    query = select(func.count()).where(InboundRecord.state == "answered")  # type: ignore[arg-type]
    while True:
        with gateway.store._engine.connect() as conn:
            done = conn.scalar(query) or 0
        if done >= count:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{done} of {count} messages answered")
        time.sleep(0.02)


def stored_in_order(gateway: Gateway) -> list[str]:
    """The platform ids of the stored messages, in the order they were stored."""
    from sqlalchemy import select

    from control_plane.gateway.records import InboundRecord

    query = select(InboundRecord.message_id).order_by(InboundRecord.id)  # type: ignore[call-overload]
    with gateway.store._engine.connect() as conn:
        return list(conn.scalars(query))


def store_fails_once(gateway: Gateway) -> threading.Event:
    """The gateway's next store of an inbound message fails (disk full); the event is set when it did."""
    store, receive = gateway.store, gateway.store.receive
    failed = threading.Event()

    def fails_once(*args: Any) -> Any:
        if not failed.is_set():
            failed.set()
            raise OSError("disk full")
        return receive(*args)

    store.receive = fails_once  # type: ignore[method-assign,assignment]
    return failed


APPROVE_THEN_SEND_FILE: list[dict[str, Any]] = [
    {"tool_calls": [{"name": "open_port", "arguments": {"port": 7000}}]},
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "n.md", "content": "# n\n"}}]},
    {"tool_calls": [{"name": "send_file", "arguments": {"path": "n.md"}}]},
    {"text": "Opened; the notes are in n.md."},
]
"""A turn for asking_registry: an approval (open_port), then a file sent back; the platform's
refusal of files, where it has one, reaches the model as send_file's result."""


class PortArgs(BaseModel):
    port: int


def asking_registry(timeout: float) -> Registry:
    """The built-in tools plus one that asks for an approval, as a tool opening a port would."""

    def open_port(ctx: ToolContext, args: PortArgs) -> ToolResult:
        answer = ctx.ask(
            kind="approval", prompt=f"Expose port {args.port}?", choices=["once", "always", "no"],
            timeout=timeout, detail={"port": str(args.port)},
        )  # fmt: skip
        return ToolResult(f"answer: {answer}")

    registry = Registry()
    for found in TOOLS.select(sorted(TOOLS.toolsets)).values():
        registry.register(found)
    registry.register(Tool("open_port", "Expose a port of the sandbox.", PortArgs, open_port, "test"))
    return registry


SEND_A_FILE = [
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "out/r.txt", "content": "numbers\n"}}]},
    {"tool_calls": [{"name": "send_file", "arguments": {"path": "out/r.txt"}}]},
    {"text": "Sent."},
]


WEBHOOK_SECRET = b"webhook-test-secret"


def listening_port(gateway: Any) -> int:
    adapter: WebhookAdapter = gateway.adapters["webhook"]
    deadline = time.monotonic() + 30
    while adapter.port in (None, 0):
        assert time.monotonic() < deadline, "the webhook never listened"
        time.sleep(0.02)
    return adapter.port  # type: ignore[return-value]


async def webhook_post(
    port: int, body: dict[str, Any], *, secret: bytes = WEBHOOK_SECRET, skew: int = 0
) -> tuple[int, Any]:
    raw = json.dumps(body).encode()
    stamp = str(int(time.time()) + skew)
    headers = {"X-Hermetic-Timestamp": stamp, "X-Hermetic-Signature": sign(secret, stamp, raw)}
    async with (
        aiohttp.ClientSession() as client,
        client.post(f"http://127.0.0.1:{port}/webhook", data=raw, headers=headers) as response,
    ):
        return response.status, await response.json()
