"""An ASGI app served over real HTTP for a test (uvicorn in a thread, on a free loopback port), and the
profile settings a served control plane gets in tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.served import serve
from control_plane.config.settings import Settings, load_settings

serve_app = serve
"""Serve an app on 127.0.0.1 for a test; yields its base URL (bench/served.py, which benchmarks use too)."""


def scripted_profiles(root: Path, model_url: str, **overrides: Any) -> Callable[[str], Settings]:
    """`create_app`'s settings of a profile under `root`: the scripted model at `model_url` (no
    retries), the local backend; `overrides` as `load_settings` takes them, for every profile."""
    model = {"name": "openai/scripted", "api_base": model_url, "api_key": "k-123456", "retries": 0}

    def settings_for(profile: str) -> Settings:
        return load_settings(profile, root=root, model=model, backend="local", **overrides)

    return settings_for
