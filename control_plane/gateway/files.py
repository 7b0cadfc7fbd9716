"""Files between a chat and the session's sandbox: what the user sends lands in `uploads/` of the
workspace; the `send_file` tool (tools/send_file.py, offered in gateway sessions) sends a sandbox file to
the chat through the turn's `chat_sender`, and
the images of tool results (a figure, a screenshot) go to the chat as files where the platform takes them."""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from backends import Sandbox

from ..events import ToolImage
from ..tools import SendFile
from .base import Adapter, AdapterError, ConnectionLost
from .stream import patiently

log = logging.getLogger("hermetic.gateway")
SEND_TIMEOUT = 120.0
Sender = Callable[[Path], Coroutine[Any, Any, str]]


def safe_name(name: str) -> str:
    """A file name the user chose, reduced to one harmless path component."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name).name).lstrip(".")
    return cleaned[:100] or "file"


def store_upload(sandbox: Sandbox, name: str, data: bytes) -> str:
    """Write an uploaded file into the workspace's uploads/; its path there."""
    path = f"uploads/{safe_name(name)}"
    sandbox.runtime.fs_write(path=path, data=base64.b64encode(data).decode())
    return path


def chat_sender(loop: asyncio.AbstractEventLoop, send: Sender) -> SendFile:
    """The send_file capability of one turn: from the tool's thread, `send` on the gateway's loop,
    waited for up to SEND_TIMEOUT (its error, the chat's refusal, is raised to the tool)."""

    def send_file(path: Path) -> None:
        asyncio.run_coroutine_threadsafe(send(path), loop).result(SEND_TIMEOUT)

    return send_file


async def send_images(adapter: Adapter, chat: str, thread: str | None, images: list[ToolImage]) -> list[str]:
    """Post each image to the chat as a file; a line for each that could not go (the platform takes no
    files, or refused it) saying where it is kept instead."""
    unsent = []
    with tempfile.TemporaryDirectory(prefix="hermetic-image-") as tmp:
        for number, image in enumerate(images):
            stem = Path(safe_name(image.label.split(" ")[0])).stem
            path = Path(tmp) / f"{number}-{stem}.{'jpg' if image.mime == 'image/jpeg' else 'png'}"
            path.write_bytes(base64.b64decode(image.data))
            try:
                await patiently(lambda path=path: adapter.send_file(chat, path, thread=thread))  # type: ignore[misc]
            except (AdapterError, ConnectionLost) as exc:
                log.info("%s chat %s: image not sent: %s", adapter.platform, chat, exc)
                unsent.append(f"[an image not shown here: {image.label}]")
    return unsent
