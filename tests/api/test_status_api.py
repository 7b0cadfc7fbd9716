"""The status routes over HTTP (uvicorn on a free port): doctor's checks for the caller's profile, and
each configured chat platform as a real gateway records it (the webhook answering a signed message,
Telegram refusing a wrong token at the Bot API stand-in); no token, a wrong one, bad input."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from api_client import auth
from gateway_harness import Running, gateway_settings, listening_port, webhook_post
from served_app import serve_app
from telegram_standin import TelegramStandin

from control_plane.api.app import create_app
from control_plane.store.tokens import TokenStore

SECRET = "webhook-test-secret"  # test_gateway_webhook's webhook_post signs with it


def until(read: Callable[[], Any], done: Callable[[Any], bool], timeout: float = 60) -> Any:
    """Read again until `done` holds (the gateway records each change as it happens, on its own loop)."""
    deadline = time.monotonic() + timeout
    while not done(found := read()):
        assert time.monotonic() < deadline, f"never came to pass; last read: {found}"
        time.sleep(0.05)
    return found


def test_the_gateways_platforms_as_the_running_gateway_records_them(tmp_path: Path, fake_llm: Any) -> None:
    fake_llm.load([{"text": "pong"}])
    standin = TelegramStandin()
    try:
        gateway = {
            "webhook": {"secret": SECRET, "port": 0, "reply_timeout": 30},
            "telegram": {"token": "999:WRONG-token", "base_url": standin.base_url},
        }
        settings = gateway_settings(tmp_path, fake_llm.url, None, gateway=gateway)
        token = TokenStore(tmp_path).create("default")
        app = create_app(tmp_path, lambda profile: settings)
        with serve_app(app) as url, httpx.Client(base_url=url, headers=auth(token)) as client:

            def platforms() -> dict[str, Any]:
                answer = client.get("/status/gateway")
                assert answer.status_code == 200, answer.text
                return {p["platform"]: p for p in answer.json()["platforms"]}

            before = platforms()
            assert sorted(before) == ["telegram", "webhook"]
            assert {p["state"] for p in before.values()} == {"never run"}
            assert before["webhook"]["since"] is None and before["webhook"]["last_error"] is None

            with Running(settings) as running:
                started = time.time()
                found = until(platforms, lambda p: p["telegram"]["state"] == "stopped")
                telegram = found["telegram"]
                assert "Telegram refused" in telegram["last_error"] and telegram["since"] >= started - 1
                assert telegram["errors"] == [telegram["last_error"]]
                assert found["webhook"]["state"] == "connected" and found["webhook"]["errors"] == []

                message = {"id": "m-1", "chat": "ops", "user": "ci", "text": "ping"}
                assert asyncio.run(webhook_post(listening_port(running), message)) == (200, {"reply": "pong"})
                webhook = until(platforms, lambda p: p["webhook"]["answered"] == 1)["webhook"]
                assert (webhook["received"], webhook["waiting"]) == (1, 0)
                assert webhook["last_message_at"] >= started
                # counted from the stored messages: the record is as written when the webhook connected
                assert webhook["updated_at"] == webhook["since"]

            after = platforms()  # a clean stop is recorded too
            assert after["webhook"]["state"] == "stopped" and after["webhook"]["since"] >= webhook["since"]
            assert after["telegram"]["last_error"] == telegram["last_error"]
        app.state.hub.close()
    finally:
        standin.close()


def test_doctors_checks_for_the_profile_and_what_the_routes_refuse(tmp_path: Path, fake_llm: Any) -> None:
    settings = gateway_settings(tmp_path, fake_llm.url, None)
    token = TokenStore(tmp_path).create("default")
    app = create_app(tmp_path, lambda profile: settings)
    with serve_app(app) as url, httpx.Client(base_url=url) as client:
        offline = client.get("/status/checks", headers=auth(token))
        assert offline.status_code == 200, offline.text
        body = offline.json()
        rows = {row["name"]: row for row in body["checks"]}
        database = rows["database"]
        assert database["status"] == "ok" and str(tmp_path / "hermetic.db") in database["detail"]
        assert rows["model"] == {
            "name": "model", "status": "ok", "detail": "openai/scripted configured (not called: --offline)",
            "fix": None,
        }  # fmt: skip
        assert body["model_called"] is False and fake_llm.requests == []
        assert body["failed"] == sum(row["status"] == "fail" for row in body["checks"])
        assert {"dockerd", "bubblewrap", "backend local", "recall", "snapshots"} <= set(rows)
        again = client.get("/status/checks", headers=auth(token)).json()  # within 10 s: the same run
        assert again["checked_at"] == body["checked_at"] and again["checks"] == body["checks"]

        fake_llm.load([{"text": "OK"}])
        called = client.get("/status/checks", params={"call_model": "true"}, headers=auth(token)).json()
        (model,) = [row for row in called["checks"] if row["name"] == "model"]
        assert model["detail"] == "openai/scripted answers" and called["model_called"] is True
        assert fake_llm.requests[0]["messages"][-1]["content"] == "Say OK"

        for path in ("/status/checks", "/status/gateway"):
            assert client.get(path).status_code == 401
            assert client.get(path, headers=auth("not-a-token")).status_code == 401
        for bad in ("maybe", "", "\x00", "1" * 5000):
            refused = client.get("/status/checks", params={"call_model": bad}, headers=auth(token))
            assert refused.status_code == 422, (bad, refused.text)
        assert client.post("/status/gateway", headers=auth(token)).status_code == 405
        assert client.get("/status/gateway", headers=auth(token)).json() == {"platforms": []}
    app.state.hub.close()
