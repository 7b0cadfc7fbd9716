"""Files between a chat and the session's sandbox: what the user sends lands in `uploads/` of the
workspace; the `send_file` tool (tools/send_file.py, offered in gateway sessions) sends a sandbox file to
the chat through the turn's `chat_sender`, and
the images of tool results (a figure, a screenshot) go to the chat as files where the platform takes them.
A file larger than the platform's `max_file_bytes` is not taken; one that cannot be taken is said to the
user and noted for the model, and the message's text is answered still."""

from __future__ import annotations

import asyncio
import base64
import logging
import re
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from backends import Sandbox

from ..events import ToolImage
from ..tools import SendFile
from .base import Adapter, AdapterError, Attachment, ConnectionLost
from .stream import patiently

if TYPE_CHECKING:
    import aiohttp

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


class TooLarge(AdapterError):
    """A file over the size the gateway takes."""

    def __init__(self, name: str, limit: int) -> None:
        super().__init__(f"{name} is larger than the {limit:,} bytes this gateway takes")


async def take_file(
    adapter: Adapter, attachment: Attachment, limit: int, sandbox: Callable[[], Sandbox]
) -> tuple[str, str | None]:
    """Download a file the user sent into `sandbox()`'s uploads/: the line that tells the model, and
    what to tell the user when it could not be taken (None: it was)."""
    name = safe_name(attachment.name)
    try:
        if attachment.size is not None and attachment.size > limit:
            raise TooLarge(name, limit)  # not downloaded at all
        data = await adapter.fetch(attachment)
        if len(data) > limit:
            raise TooLarge(name, limit)
    except (AdapterError, ConnectionLost) as exc:
        log.info("%s: file %s not taken: %s", adapter.platform, name, exc)
        note = f"\n[the user sent a file, {name}, that could not be taken: {exc}]"
        return note, f"I could not take your file {name}: {exc}"
    path = await asyncio.to_thread(store_upload, await asyncio.to_thread(sandbox), attachment.name, data)
    return f"\n[the user sent a file: {path} ({len(data):,} bytes) in your workspace]", None


def listed_host(url: str, hosts: list[str]) -> bool:
    """Whether `url` is http(s) on one of `hosts`: a host name, `host:port`, or `.domain` for any host
    under that domain."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        return False
    listed = {h.lower() for h in hosts}
    return (
        host in listed
        or f"{host}:{parts.port}" in listed
        or any(h.startswith(".") and host.endswith(h) for h in listed)
    )


MAX_REDIRECTS = 5


async def download(
    session: aiohttp.ClientSession, url: str, limit: int, name: str, headers: dict[str, str] | None = None,
    *, follow: Callable[[str], bool] | None = None,
) -> bytes:  # fmt: skip
    """GET `url` whole, reading no more than `limit` bytes. A redirect is followed only to a URL that
    `follow` accepts (none without it), and `headers` (a token) go only to `url`'s own origin."""
    import aiohttp  # loaded by whoever made the session; not by this module (every command's start-up)

    origin = urlsplit(url)[:2]
    try:
        for _ in range(MAX_REDIRECTS + 1):
            sent = headers if urlsplit(url)[:2] == origin else None
            async with session.get(url, headers=sent, allow_redirects=False) as response:
                if 300 <= response.status < 400 and follow is not None:
                    target = urljoin(url, response.headers.get("Location", ""))
                    if not follow(target):
                        raise AdapterError(
                            f"the file server redirected to {target[:200]}, which is not allowed"
                        )
                    url = target
                    continue
                return await _whole(response, limit, name)
        raise AdapterError(f"the file server redirected more than {MAX_REDIRECTS} times")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ConnectionLost(f"the file server is unreachable: {exc!r}") from exc


async def _whole(response: aiohttp.ClientResponse, limit: int, name: str) -> bytes:
    if response.status != 200:
        if response.status >= 500:
            raise ConnectionLost(f"the file server answered {response.status}")
        moved = " (a redirect, not followed)" if 300 <= response.status < 400 else ""
        raise AdapterError(f"the file server answered {response.status}{moved}, not the file")
    if (response.content_length or 0) > limit:
        raise TooLarge(name, limit)
    data = bytearray()
    async for chunk in response.content.iter_chunked(65536):
        data += chunk
        if len(data) > limit:
            raise TooLarge(name, limit)
    return bytes(data)


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
