"""Files between a chat and the session's sandbox: what the user sends lands in `uploads/` of the
workspace; the `send_file` tool (offered in gateway sessions only) sends a sandbox file to the chat, and
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

from pydantic import BaseModel, Field

from backends import Sandbox
from backends.errors import SandboxError

from ..events import ToolImage
from ..tools import TOOLS, Registry, Tool, ToolContext, ToolResult
from .base import Adapter, AdapterError, ConnectionLost
from .stream import patiently

log = logging.getLogger("hermetic.gateway")
TOOLSET = "gateway"
SEND_TIMEOUT = 120.0
Sender = Callable[[Path], Coroutine[Any, Any, str]]
_outboxes: dict[str, tuple[asyncio.AbstractEventLoop, Sender]] = {}
"""Session id -> how to send a file to its chat, set by the gateway while the session's turn runs."""


def safe_name(name: str) -> str:
    """A file name the user chose, reduced to one harmless path component."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name).name).lstrip(".")
    return cleaned[:100] or "file"


def store_upload(sandbox: Sandbox, name: str, data: bytes) -> str:
    """Write an uploaded file into the workspace's uploads/; its path there."""
    path = f"uploads/{safe_name(name)}"
    sandbox.runtime.fs_write(path=path, data=base64.b64encode(data).decode())
    return path


def open_outbox(session_id: str, loop: asyncio.AbstractEventLoop, sender: Sender) -> None:
    _outboxes[session_id] = (loop, sender)


def close_outbox(session_id: str) -> None:
    _outboxes.pop(session_id, None)


class SendFileArgs(BaseModel):
    path: str = Field(description="The file in the sandbox, relative to the workspace or absolute.")


def send_file(ctx: ToolContext, args: SendFileArgs) -> ToolResult:
    """Send a file from the sandbox to the user's chat (a report, an image, an archive you made)."""
    outbox = _outboxes.get(ctx.session_id)
    if outbox is None:
        return ToolResult("error: this session has no chat to send files to", ok=False)
    loop, sender = outbox
    with tempfile.TemporaryDirectory(prefix="hermetic-send-") as tmp:
        try:
            local = ctx.sandbox.download(args.path, tmp)
        except SandboxError as exc:
            return ToolResult(f"error: cannot read {args.path}: {exc}", ok=False)
        if not local.is_file():
            return ToolResult(f"error: {args.path} is a directory; send one file (or an archive)", ok=False)
        future = asyncio.run_coroutine_threadsafe(sender(local), loop)
        try:
            future.result(SEND_TIMEOUT)
        except Exception as exc:
            return ToolResult(f"error: the chat refused the file: {exc}", ok=False)
    return ToolResult(f"sent {local.name} to the chat")


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


def gateway_registry(base: Registry = TOOLS) -> Registry:
    """`base`'s tools plus send_file, for the gateway's agent."""
    registry = Registry()
    for found in base.select(sorted(base.toolsets)).values():
        registry.register(found)
    description = " ".join((send_file.__doc__ or "").split())
    registry.register(Tool("send_file", description, SendFileArgs, send_file, TOOLSET))
    return registry
