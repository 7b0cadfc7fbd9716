"""A local stand-in of the WhatsApp Cloud API (https://developers.facebook.com/docs/whatsapp/cloud-api/),
for pywa to talk to (its httpx client's base_url set to this). It records what it was sent, and plays
Meta's side of the webhook: each user message is POSTed to the gateway's webhook, signed with the app
secret (X-Hub-Signature-256: sha256=HMAC-SHA256(app secret, body)), and POSTed again while the gateway
answers anything but 200, as WhatsApp redelivers.

Implemented (under /v{version}/): GET /{phone-id} (the business phone number); POST /{phone-id}/messages
with type text, interactive (button, up to three reply buttons), template and document, and the
read + typing_indicator status; a free-form message to a user whose last message is more than 24 hours
old is refused with error 131047 (re-engagement), as the Cloud API does; POST /{phone-id}/media
(multipart upload, answers the media id); GET /{media-id} (its url) and GET of that url (the bytes).
Groups (the Groups API's messaging): a message in a group carries its `group_id`; POST /messages with
`recipient_type: group` and the group id in `to` sends to it (text, media, templates; an interactive
message is refused there, as groups take none).
Errors use the Graph API's `{"error": {"message", "type", "code", "fbtrace_id"}}`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from aiohttp import web
from standin_server import StandinServer, wait_listening

TOKEN = "wa-test-token"
APP_SECRET = "wa-app-secret"
VERIFY_TOKEN = "wa-verify"
PHONE_ID = "106540352242922"
NUMBER = "15550001111"
"""The business's display phone number (digits): how group members mention it, who its messages are from."""
WINDOW = 24 * 3600
REDELIVERY = 120.0
"""Seconds a webhook is posted again until answered 200 (WhatsApp keeps trying for days; a gateway
starting on a loaded machine takes well over the 5 s that 50 quick attempts gave)."""


class WhatsAppStandin(StandinServer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.sent: list[dict[str, Any]] = []
        """every message accepted by POST /messages (the status ones too), with its "id" """
        self.media: dict[str, tuple[str, bytes]] = {}
        self.last_seen: dict[str, float] = {}
        """user -> when their last message was sent (opens the 24-hour window)"""
        self.webhook_url = ""
        self._withheld: asyncio.Event | None = None
        """Set while messages are taken but their answers withheld (see hold_replies)."""
        super().__init__("whatsapp-standin")

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def gateway_config(self, allow_users: list[str]) -> dict[str, Any]:
        """The gateway's whatsapp settings for this stand-in, its webhook listener on a free port (which
        the stand-in then posts to)."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.webhook_url = f"http://127.0.0.1:{port}/whatsapp"
        return {
            "phone_id": PHONE_ID, "token": TOKEN, "app_secret": APP_SECRET, "verify_token": VERIFY_TOKEN,
            "api_base": self.api_base, "port": port, "allow_users": allow_users,
        }  # fmt: skip

    # -- the test's side -------------------------------------------------------------------

    def user_says(
        self,
        user: str,
        text: str = "",
        *,
        at: float | None = None,
        message: dict[str, Any] | None = None,
        group: str | None = None,
    ) -> dict[str, Any]:
        """A user's message (in `group`, else to the business) POSTed (signed) to the webhook until it
        answers 200; the message."""
        sent_at = at if at is not None else time.time()
        with self._changed:
            for chat in filter(None, (user, group)):
                self.last_seen[chat] = max(self.last_seen.get(chat, 0), sent_at)
        entry = {"from": user, "id": f"wamid.{uuid.uuid4().hex}", "timestamp": str(int(sent_at))}
        entry |= {"group_id": group} if group else {}
        entry |= message or {"type": "text", "text": {"body": text}}
        self.deliver(user, entry)
        return entry

    def press(
        self, user: str, replied_to: str, button_id: str, title: str, kind: str = "button_reply"
    ) -> dict[str, Any]:
        """A press of a reply button, or (`kind="list_reply"`) the choice of a list message's row."""
        return self.user_says(
            user,
            message={
                "type": "interactive", "context": {"from": NUMBER, "id": replied_to},
                "interactive": {"type": kind, kind: {"id": button_id, "title": title}},
            },
        )  # fmt: skip

    def upload(self, name: str, data: bytes, mime: str = "text/csv") -> str:
        media_id = uuid.uuid4().hex
        with self._changed:
            self.media[media_id] = (name, data)
        return media_id

    def deliver(self, user: str, entry: dict[str, Any], within: float = REDELIVERY) -> int:
        """POST the webhook for `entry` until 200 (for `within` seconds at most); the attempts it took."""
        value = {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": NUMBER, "phone_number_id": PHONE_ID},
            "contacts": [{"profile": {"name": f"user {user}"}, "user_id": user}],  # a BSUID, no phone shown
            "messages": [entry],
        }
        body = json.dumps(
            {
                "object": "whatsapp_business_account",
                "entry": [{"id": "WABA1", "changes": [{"value": value, "field": "messages"}]}],
            }
        ).encode()
        signature = "sha256=" + hmac.new(APP_SECRET.encode(), body, hashlib.sha256).hexdigest()
        deadline = time.monotonic() + within
        attempt = 0
        while time.monotonic() < deadline:
            attempt += 1
            request = urllib.request.Request(
                self.webhook_url, body, {"Content-Type": "application/json", "X-Hub-Signature-256": signature}
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 (loopback)
                    if answer.status == 200:
                        return attempt
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)  # WhatsApp backs off between redeliveries
        raise AssertionError(f"the webhook never answered 200 for {entry['id']}")

    def hold_replies(self) -> None:
        """From now on a message sent is taken (recorded, as WhatsApp delivers it) but the answer to
        its POST is withheld until `release()`: the sender never learns the message went out."""
        self._withheld = asyncio.Event()

    def release(self) -> None:
        if self._withheld is not None:
            self._loop.call_soon_threadsafe(self._withheld.set)
            self._withheld = None

    def close(self) -> None:
        self.release()
        super().close()

    def wait_listening(self, timeout: float = 120) -> None:
        """Until the gateway's webhook listener accepts connections (it opens as the gateway starts)."""
        wait_listening(int(self.webhook_url.split(":")[2].split("/")[0]), timeout)

    def called(self, method: str, path: str) -> list[dict[str, Any]]:
        with self._changed:
            return [body for m, p, body in self.calls if m == method and path in p]

    def messages_to(self, user: str) -> list[dict[str, Any]]:
        with self._changed:
            return [m for m in self.sent if m.get("addressee") == user]

    def texts(self, user: str) -> list[str]:
        return [m["text"]["body"] for m in self.messages_to(user) if m["type"] == "text"]

    # -- the server ------------------------------------------------------------------------

    def _progress(self) -> object:
        return [(m, p) for m, p, _ in self.calls]

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{version:v[0-9.]+}/{path:.*}", self._api)
        app.router.add_get("/download/{media}", self._download)
        return app

    def _error(self, status: int, code: int, message: str) -> web.Response:
        error = {"message": message, "type": "OAuthException", "code": code, "fbtrace_id": "A1"}
        return web.json_response({"error": error}, status=status)

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {TOKEN}"

    async def _download(self, request: web.Request) -> web.Response:
        with self._changed:
            self.calls.append(("GET", f"download/{request.match_info['media']}", {}))
            self._changed.notify_all()
        if not self._authorized(request) or request.match_info["media"] not in self.media:
            return self._error(401, 190, "Invalid OAuth access token.")
        return web.Response(body=self.media[request.match_info["media"]][1])

    async def _api(self, request: web.Request) -> web.Response:
        path, method = request.match_info["path"], request.method
        if request.content_type == "multipart/form-data":
            form = await request.post()
            upload = form["file"]
            body: dict[str, Any] = {"file": (upload.filename, upload.file.read())}  # type: ignore[union-attr]
        elif request.can_read_body:
            body = await request.json()
        else:
            body = dict(request.query)
        with self._changed:
            self.calls.append((method, path, body))
            self._changed.notify_all()
        if not self._authorized(request):
            return self._error(401, 190, "Invalid OAuth access token.")
        if method == "GET" and path == PHONE_ID:
            return web.json_response(
                {"id": PHONE_ID, "display_phone_number": NUMBER, "verified_name": "Hermetic"}
            )
        if method == "POST" and path == f"{PHONE_ID}/media":
            media_id = self.upload(*body["file"])
            return web.json_response({"id": media_id})
        if method == "POST" and path == f"{PHONE_ID}/messages":
            answer, withheld = self._message(body), self._withheld
            if withheld is not None and body.get("status") != "read":
                await withheld.wait()
            return answer
        if method == "GET" and path in self.media:
            url = f"{self.api_base}/download/{path}"
            size = len(self.media[path][1])
            found = {"url": url, "mime_type": "application/octet-stream", "sha256": "0", "file_size": size}
            return web.json_response(found | {"id": path, "messaging_product": "whatsapp"})
        return self._error(400, 100, f"Unsupported {method} request to {path}")

    def _message(self, body: dict[str, Any]) -> web.Response:
        if body.get("status") == "read":
            with self._changed:
                self.sent.append(body)
                self._changed.notify_all()
            return web.json_response({"success": True})
        to = str(body.get("to") or body.get("recipient") or "")  # a phone number, a BSUID, or a group
        if body.get("recipient_type") == "group" and body.get("type") == "interactive":
            return self._error(400, 100, "(#100) Invalid parameter: groups take no interactive messages")
        with self._changed:
            closed = time.time() - self.last_seen.get(to, 0) > WINDOW
        if closed and body.get("type") != "template":
            return self._error(400, 131047, "Re-engagement message")
        message_id = f"wamid.{uuid.uuid4().hex}"
        with self._changed:
            self.sent.append(body | {"id": message_id, "addressee": to})
            self._changed.notify_all()
        return web.json_response(
            {
                "messaging_product": "whatsapp",
                "contacts": [{"input": to, "wa_id": to}],
                "messages": [{"id": message_id}],
            }
        )
