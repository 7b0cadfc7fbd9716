"""The scripted OpenAI-compatible server as a fixture, and model settings pointing at it.

def test_x(fake_llm: FakeLLM) -> None:
    fake_llm.load([{"text": "hi"}])
    router = Router(scripted_model(fake_llm))
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from control_plane.config.settings import ModelSettings
from control_plane.models.fake_llm import FakeLLM


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A started server with an empty script: `fake_llm.load(turns)` gives it one."""
    with FakeLLM() as server:
        yield server


def scripted_model(server: FakeLLM, name: str = "openai/scripted", **overrides: Any) -> ModelSettings:
    """Settings for a model served by `server`; backoff is tiny so retries take no time."""
    settings: dict[str, Any] = {
        "name": name,
        "api_base": server.url,
        "api_key": "test",
        "timeout": 10.0,
        "retries": 2,
        "backoff": 0.01,
        "backoff_max": 0.05,
    }
    return ModelSettings(**(settings | overrides))
