"""The OpenAI endpoint's time to the first streamed content byte, vs the scripted model's own: a new chat
and the next turn of one.

    python -m bench.openai_stream [-n 50]
"""

from __future__ import annotations

import http.client
import json
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import uvicorn

from control_plane.api.app import create_app
from control_plane.api.tokens import TokenStore
from control_plane.models.fake_llm import FakeLLM
from control_plane.settings import load_settings


def _content(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or [{}]
    return str((choices[0].get("delta") or {}).get("content") or "")


def first_content(url: str, body: dict[str, Any], headers: dict[str, str]) -> float:
    """Seconds from sending a streaming request to the first chunk with content. http.client sends the
    request in one write and reads lines as they come, so neither side waits on a delayed ACK."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        start = time.perf_counter()
        connection.request(
            "POST", parts.path, json.dumps(body), {**headers, "Content-Type": "application/json"}
        )
        response = connection.getresponse()
        first = None
        while line := response.readline():  # to the end: the turn is over when the next request comes
            if first is None and line.startswith(b"data: {") and _content(json.loads(line[6:])):
                first = time.perf_counter() - start
    finally:
        connection.close()
    if first is None:
        raise RuntimeError(f"the stream had no content (status {response.status})")
    return first


def openai_first_byte(n: int) -> tuple[list[float], list[float], list[float]]:
    turns = [{"text": "hello from the scripted model"}] * (3 * n + 12)
    with FakeLLM(turns) as model, tempfile.TemporaryDirectory() as root:
        chat = {"model": "scripted", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        direct = [first_content(f"{model.url}/chat/completions", chat, {}) for _ in range(n + 3)][3:]
        settings = {"name": "openai/scripted", "api_base": model.url, "api_key": "k", "retries": 0}

        def settings_for(profile: str) -> Any:
            return load_settings(
                profile, root=Path(root), model=settings, backend="local", learning={"enabled": False}
            )

        token = TokenStore(Path(root)).create("default")
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = uvicorn.Server(uvicorn.Config(create_app(Path(root), settings_for), log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1/chat/completions"
        headers = {"Authorization": f"Bearer {token}"}
        try:  # a new conversation each time (its first message differs), as a new chat does
            new = [
                first_content(url, {**chat, "messages": [{"role": "user", "content": f"hi {i}"}]}, headers)
                for i in range(n + 3)
            ]
            session = _session_of(url, chat, headers)  # then turns of one conversation (header echoed)
            same = [
                first_content(url, chat, {**headers, "X-Hermetic-Session": session}) for _ in range(n + 3)
            ]
        finally:
            server.should_exit = True
            thread.join(30)
        return direct, new[3:], same[3:]


def _session_of(url: str, body: dict[str, Any], headers: dict[str, str]) -> str:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
    try:
        connection.request(
            "POST",
            parts.path,
            json.dumps({**body, "stream": False}),
            {**headers, "Content-Type": "application/json"},
        )
        response = connection.getresponse()
        response.read()
        return response.getheader("X-Hermetic-Session") or ""
    finally:
        connection.close()
