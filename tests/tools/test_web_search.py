"""web_search through the agent loop against loopback stand-ins of each provider's published API: the
request each provider's API expects (auth header, parameters), results in one shape, the planted result
marked, fallbacks in order, and no sandbox involved (the key stays on the control plane)."""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_runs import call, run, settings_for, tool_messages
from search_standins import KEY, PLANTED, SearchStandin

from control_plane.agent.agent import Agent
from control_plane.models.fake_llm import FakeLLM

APIS = ("searxng", "brave", "tavily", "exa")


@pytest.fixture(scope="module")
def standins() -> Iterator[dict[str, SearchStandin]]:
    servers = {api: SearchStandin(api) for api in APIS}
    yield servers
    for server in servers.values():
        server.close()


def search_settings(standins: dict[str, SearchStandin], **overrides: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "searxng_url": standins["searxng"].url,
        "brave_url": standins["brave"].url,
        "brave_api_key": KEY,
        "tavily_url": standins["tavily"].url,
        "tavily_api_key": KEY,
        "exa_url": standins["exa"].url,
        "exa_api_key": KEY,
    }
    return settings | overrides


def searched(
    tmp_path: Path, fake_llm: FakeLLM, search: dict[str, Any], **arguments: Any
) -> tuple[Agent, str, str]:
    fake_llm.load([{"tool_calls": [call("web_search", **arguments)]}, {"text": "done"}])
    agent = Agent(settings_for(tmp_path, fake_llm.url, "local", toolsets=["web"], web={"search": search}))
    conversation = agent.new_conversation()
    end, _ = run(conversation, "search")
    assert end.reason == "done"
    return agent, conversation.id, tool_messages(fake_llm.requests[-1])[-1]


@pytest.mark.parametrize("api", APIS)
def test_each_provider_is_asked_as_its_api_says_and_answers_in_one_shape(
    tmp_path: Path, fake_llm: FakeLLM, standins: dict[str, SearchStandin], api: str
) -> None:
    before = len(standins[api].requests)
    agent, session, seen = searched(
        tmp_path,
        fake_llm,
        search_settings(standins, provider=api),
        query="hermetic agent",
        limit=3,
        recency="week",
    )
    assert seen.startswith(f"[3 results from {api}]\n1. Hermetic agent")
    assert "   https://example.org/hermetic\n   A sealed agent." in seen
    assert "(2026-11-30)" in seen and "3. Search APIs\n" in seen
    planted = seen.split("2. Sealed tools")[1].split("3. Search APIs")[0]
    assert (
        "[WARNING: this result contains text that tries to instruct you (injection" in planted
        and PLANTED in planted
    )
    assert "WARNING" not in seen.split("2. Sealed tools")[0]
    request = standins[api].requests[before]
    if api == "searxng":
        assert request["query"] == {"q": "hermetic agent", "format": "json", "time_range": "week"}
    elif api == "brave":
        assert request["query"] == {"q": "hermetic agent", "count": "3", "freshness": "pw"}
        assert (
            request["headers"]["X-Subscription-Token"] == KEY
            and request["headers"]["Accept"] == "application/json"
        )
    elif api == "tavily":
        assert request["json"] == {"query": "hermetic agent", "max_results": 3, "time_range": "week"}
        assert request["headers"]["Authorization"] == f"Bearer {KEY}"
    else:
        since = datetime.datetime.fromisoformat(request["json"]["startPublishedDate"].replace("Z", "+00:00"))
        assert abs(
            (datetime.datetime.now(datetime.UTC) - since) - datetime.timedelta(days=7)
        ) < datetime.timedelta(minutes=5)
        assert request["json"]["numResults"] == 3 and request["headers"]["x-api-key"] == KEY
    assert agent.sandboxes.peek(session) is None  # it ran on the control plane: no sandbox was made
    assert KEY not in seen


def test_fallbacks_are_tried_in_order_and_say_why(
    tmp_path: Path, fake_llm: FakeLLM, standins: dict[str, SearchStandin]
) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    search = search_settings(
        standins, provider="brave", brave_api_key="wrong-key", searxng_url=dead, fallbacks=["searxng", "exa"]
    )
    _, _, seen = searched(tmp_path, fake_llm, search, query="hermetic")
    assert seen.startswith("[3 results from exa; before it: brave answered HTTP 401: ")
    assert "; searxng is unreachable: ConnectError" in seen.splitlines()[0]
    assert "wrong-key" not in seen  # a configured key never reaches the model


def test_without_a_provider_or_a_key_the_error_says_what_to_set(tmp_path: Path, fake_llm: FakeLLM) -> None:
    _, _, seen = searched(tmp_path, fake_llm, {}, query="x")
    assert (
        "error: no search provider is configured: set web.search.provider to searxng, brave, tavily or exa"
        in seen
    )
    _, _, seen = searched(tmp_path, fake_llm, {"provider": "tavily"}, query="x")
    assert (
        "error: every search provider failed: tavily needs an API key: set web.search.tavily_api_key" in seen
    )
