"""An ASGI app served over real HTTP for a test (uvicorn in a thread, on a free loopback port), and the
profile settings a served control plane gets in tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from control_plane.settings import Settings, load_settings


def scripted_profiles(root: Path, model_url: str, **overrides: Any) -> Callable[[str], Settings]:
    """`create_app`'s settings of a profile under `root`: the scripted model at `model_url` (no
    retries), the local backend; `overrides` as `load_settings` takes them, for every profile."""
    model = {"name": "openai/scripted", "api_base": model_url, "api_key": "k-123456", "retries": 0}

    def settings_for(profile: str) -> Settings:
        return load_settings(profile, root=root, model=model, backend="local", **overrides)

    return settings_for


@contextlib.contextmanager
def serve_app(app: ASGIApp) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 (a port the kernel picks); yields its base URL, stops it on exit."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
