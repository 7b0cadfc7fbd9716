"""The listener WeCom calls back, for an application (wecom.py) and an intelligent robot (wecom_bot.py)
alike: a GET is the check WeCom makes when the URL is saved (its echostr decrypted and sent back), a POST
is a callback, handed to the adapter; both are opened by wecom_crypto.py before anything is read."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from ..config.chat_wecom import WeComCallbacks
from .listener import listen
from .wecom_crypto import CallbackCipher, Refused

log = logging.getLogger("hermetic.gateway.wecom")
MAX_BODY = 1_000_000
"""Bytes of a callback's body: a message is a few KB (files come as ids or URLs)."""


def open_callback(cipher: CallbackCipher, request: web.Request, encrypted: str) -> bytes:
    """The plaintext of a callback's ciphertext, its signature checked. Raises Refused."""
    query = request.query
    return cipher.open(
        query.get("msg_signature", ""), query.get("timestamp", ""), query.get("nonce", ""), encrypted
    )


async def serve_callbacks(
    platform: str,
    settings: WeComCallbacks,
    cipher: CallbackCipher,
    on_post: Callable[[web.Request], Awaitable[web.Response]],
) -> tuple[web.AppRunner, int]:
    """Listen on settings' host, port and path; the runner and the port it took."""

    async def verify_url(request: web.Request) -> web.Response:
        try:
            echoed = open_callback(cipher, request, request.query.get("echostr", ""))
        except Refused as exc:
            log.warning("%s: refused a URL verification: %s", platform, exc)
            return web.Response(text=str(exc), status=403)
        return web.Response(body=echoed, content_type="text/plain")

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_get(settings.path, verify_url)
    app.router.add_post(settings.path, on_post)
    runner, port = await listen(app, settings.host, settings.port)
    log.info("%s callbacks on %s:%s%s", platform, settings.host, port, settings.path)
    return runner, port
