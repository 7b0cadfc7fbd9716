"""The gateway on Feishu / Lark: the lark-oapi SDK's long connection (ws.Client) and its REST client against
the stand-in (tests/standins/feishu_standin.py), the scripted model behind the agent; a kill -9 mid-turn
like test_gateway_crash.py's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from feishu_standin import FeishuStandin
from gateway_harness import Running, gateway_settings, wait_answered

USER = "ou_7d8a6e6df7621556ce0d21922b676706"
"""An open id, as Feishu names a user to an app."""
CHAT = f"oc_p2p_{USER}"
"""The user's 1:1 chat with the bot, as the stand-in names it."""
GROUP = "oc_5ad11d72b830411d72b836c20"


@pytest.fixture
def fs() -> Iterator[FeishuStandin]:
    server = FeishuStandin()
    yield server
    server.close()


def _settings(tmp_path: Path, llm_url: str, fs: FeishuStandin, **more: Any) -> Any:
    return gateway_settings(tmp_path, llm_url, None, gateway={"feishu": fs.gateway_config([USER], **more)})


def test_a_message_is_answered_once_in_a_card_and_a_redelivered_event_is_not_answered_again(
    tmp_path: Path, fake_llm: Any, fs: FeishuStandin
) -> None:
    fake_llm.load([{"text": "**Done**\nline two"}, {"text": "second"}])
    with Running(_settings(tmp_path, fake_llm.url, fs)) as gateway:
        fs.wait_for(lambda: fs.connections)
        asked = fs.user_says(USER, "hello from feishu")
        assert fs.wait_answer(asked)["code"] == 200
        wait_answered(gateway, 1)
        (sent,) = fs.to(CHAT)
        assert sent["msg_type"] == "interactive" and sent["content"]["schema"] == "2.0"
        assert fs.texts(CHAT) == ["**Done**\nline two"]
        assert fake_llm.requests[0]["messages"][-1]["content"] == "hello from feishu"
        message_id = asked["event"]["message"]["message_id"]
        again = fs.user_says(USER, "hello from feishu", message_id=message_id)  # Feishu's re-push
        assert fs.wait_answer(again)["code"] == 200
        fs.user_says(USER, "and again")
        wait_answered(gateway, 2)
        assert fs.texts(CHAT)[1:] == ["second"] and len(fake_llm.requests) == 2
