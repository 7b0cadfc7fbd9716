"""A local stand-in of the Telegram Bot API (https://core.telegram.org/bots/api), for python-telegram-bot
to talk to through `base_url` / `base_file_url`. It records every call it was sent.

Implemented, as the reference describes them: getMe; getUpdates (long polling: `offset` confirms every
update below it, `timeout` waits for the first new one; `allowed_updates`); sendMessage and
editMessageText (text, entities, reply_markup inline keyboards, message_thread_id); sendDocument (multipart);
getFile and the file download URL (/file/bot<token>/<file_path>); sendChatAction; answerCallbackQuery;
setWebhook (url, secret_token, allowed_updates, max_connections, drop_pending_updates), getWebhookInfo and
deleteWebhook. While a webhook is set, getUpdates is refused with 409 Conflict and each pending update
is POSTed to its URL, oldest first, with the X-Telegram-Bot-Api-Secret-Token header; an answer other
than 2xx (or none) is retried after `retry_delay` until one is 2xx, as Telegram retries.
Errors use the reference's envelope ({"ok": false, "error_code", "description", "parameters"}): a
wrong token is 401, an unknown method 404, a flood 429 with parameters.retry_after.

The test side (any thread): `user_says`, `press`, `upload`, `rate_limit_edits`, `fail_polls`,
`restart`; `calls` (method, params) in order; `bot_messages(chat)` the bot's messages as they read now;
`webhook` (as set, or None) and `webhook_posts` (update_id, HTTP status) of every delivery attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from standin_server import StandinServer

TOKEN = "123456:TEST-token"
BOT = {"id": 123456, "is_bot": True, "first_name": "Hermetic", "username": "hermetic_test_bot"}
JSON_FIELDS = {"reply_markup", "allowed_updates", "entities"}


@dataclass
class BotMessage:
    chat: int
    message_id: int
    text: str
    thread: int | None = None
    buttons: list[list[dict[str, Any]]] = field(default_factory=list)
    edits: int = 0
    entities: list[dict[str, Any]] = field(default_factory=list)
    document: bytes | None = None
    filename: str | None = None


class TelegramStandin(StandinServer):
    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.call_times: list[float] = []
        """time.perf_counter() of each call, for benchmarks."""
        self.messages: dict[tuple[int, int], BotMessage] = {}
        self.files: dict[str, bytes] = {}
        self._updates: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._update_ids = itertools.count(100)
        self._limited_edits = 0
        self._retry_after = 1
        self._failing_polls = 0
        self._new_update: asyncio.Event | None = None
        self.webhook: dict[str, Any] | None = None
        self.webhook_posts: list[tuple[int, int]] = []
        """(update_id, status) of each webhook delivery attempt; 0 when no answer came."""
        self.retry_delay = 0.2
        """Seconds before a failed webhook delivery is tried again."""
        self._delivery: asyncio.Task[None] | None = None
        super().__init__("telegram-standin")

    # -- the test's side -------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/file/bot"

    def user_says(
        self,
        chat: int,
        text: str = "",
        *,
        user: int | None = None,
        chat_type: str = "private",
        thread: int | None = None,
        document: tuple[str, bytes] | None = None,
        update_id: int | None = None,
    ) -> dict[str, Any]:
        """A user's message arrives for the bot (in an update with this id, else the next); returns the
        update."""
        sender = user if user is not None else chat
        message: dict[str, Any] = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": {"id": chat, "type": chat_type, **({"title": "group"} if chat_type != "private" else {})},
            "from": {"id": sender, "is_bot": False, "first_name": f"user{sender}"},
        }
        if thread is not None:
            message |= {"message_thread_id": thread, "is_topic_message": True}
        if document is not None:
            file_id = self.upload(*document)
            message["document"] = {
                "file_id": file_id,
                "file_unique_id": f"u{file_id}",
                "file_name": document[0],
                "file_size": len(document[1]),
            }
            message["caption"] = text
        else:
            message["text"] = text
        return self._push({"message": message}, update_id)

    def redeliver(self, update: dict[str, Any]) -> None:
        """The same message again, in a new update (as after a lost confirmation)."""
        self._push({k: v for k, v in update.items() if k != "update_id"})

    def resend(self, update: dict[str, Any]) -> None:
        """The same update, update_id and all, pending again (a webhook delivery whose 200 was lost)."""
        with self._changed:
            self._updates.append(update)
        self._loop.call_soon_threadsafe(self._wake)

    def press(self, chat: int, message_id: int, data: str, *, user: int | None = None) -> dict[str, Any]:
        """A user presses an inline button under one of the bot's messages."""
        shown = self.messages[(chat, message_id)]
        sender = user if user is not None else chat
        query = {
            "id": str(next(self._ids)),
            "from": {"id": sender, "is_bot": False, "first_name": f"user{sender}"},
            "chat_instance": "1",
            "data": data,
            "message": {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": {"id": chat, "type": "private"},
                "from": BOT,
                "text": shown.text,
            },
        }
        return self._push({"callback_query": query})

    def upload(self, name: str, data: bytes) -> str:
        file_id = f"f{next(self._ids)}"
        self.files[file_id] = data
        return file_id

    def rate_limit_edits(self, count: int, retry_after: int = 1) -> None:
        """The next `count` editMessageText calls get 429 with this retry_after."""
        with self._changed:
            self._limited_edits, self._retry_after = count, retry_after

    def fail_polls(self, count: int) -> None:
        """The next `count` getUpdates calls answer 502 Bad Gateway."""
        with self._changed:
            self._failing_polls = count

    def restart(self, down_for: float = 0.0) -> None:
        """Stop listening (open long polls are cut), stay down a while, listen again on the same port."""
        self._run(self._stop())
        time.sleep(down_for)
        self._run(self._start(self.port))

    def bot_messages(self, chat: int) -> list[BotMessage]:
        with self._changed:
            return [m for (c, _), m in sorted(self.messages.items()) if c == chat]

    def called(self, method: str) -> list[dict[str, Any]]:
        with self._changed:
            return [params for name, params in self.calls if name == method]

    # -- the server ------------------------------------------------------------------------

    def _progress(self) -> object:
        return [name for name, _ in self.calls]

    def _push(self, update: dict[str, Any], update_id: int | None = None) -> dict[str, Any]:
        update = {"update_id": next(self._update_ids) if update_id is None else update_id, **update}
        with self._changed:
            self._updates.append(update)
        self._loop.call_soon_threadsafe(self._wake)
        return update

    def _wake(self) -> None:
        if self._new_update is not None:
            self._new_update.set()

    def _app(self) -> web.Application:
        self._new_update = asyncio.Event()  # made on the loop, at each (re)start
        app = web.Application()
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        self._delivery = asyncio.get_running_loop().create_task(self._deliver_webhooks())
        return app

    async def _stop(self) -> None:
        if self._delivery is not None:
            self._delivery.cancel()
            await asyncio.gather(self._delivery, return_exceptions=True)
            self._delivery = None
        await super()._stop()

    async def _deliver_webhooks(self) -> None:
        """Telegram's side of a webhook: each pending update POSTed, in order, until answered 2xx."""
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as client:
            while True:
                assert self._new_update is not None
                self._new_update.clear()
                with self._changed:
                    hook, pending = self.webhook, self._updates[:1]
                if hook is None or not pending:
                    await self._new_update.wait()
                    continue
                status = await self._post(client, hook, pending[0])
                with self._changed:
                    self.webhook_posts.append((pending[0]["update_id"], status))
                    if 200 <= status < 300 and pending[0] in self._updates:
                        self._updates.remove(pending[0])
                    self._changed.notify_all()
                if not 200 <= status < 300:
                    await asyncio.sleep(self.retry_delay)  # Telegram's retry, not a wait of the test

    async def _post(self, client: aiohttp.ClientSession, hook: dict[str, Any], update: dict[str, Any]) -> int:
        headers = {"X-Telegram-Bot-Api-Secret-Token": hook["secret_token"]} if hook["secret_token"] else {}
        try:
            async with client.post(hook["url"], json=update, headers=headers) as answer:
                return answer.status
        except (aiohttp.ClientError, TimeoutError):  # refused, cut (a killed gateway), no answer in time
            return 0

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        if request.can_read_body:
            if request.content_type == "application/json":
                params |= await request.json()
            else:
                form = await request.post()
                for name, value in form.items():
                    params[name] = value.file.read() if isinstance(value, web.FileField) else value
                    if isinstance(value, web.FileField):
                        params[f"{name}.filename"] = value.filename
        for name in JSON_FIELDS & set(params):
            if isinstance(params[name], str):
                params[name] = json.loads(params[name])
        return params

    async def _api(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        params = await self._params(request)
        with self._changed:
            self.calls.append((method, params))
            self.call_times.append(time.perf_counter())
            self._changed.notify_all()
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return _error(404, "Not Found: method not found")
        return await handler(params)

    async def _file(self, request: web.Request) -> web.Response:
        data = self.files.get(request.match_info["path"])
        if request.match_info["token"] != self.token or data is None:
            return web.Response(status=404)
        return web.Response(body=data)

    async def _m_getMe(self, params: dict[str, Any]) -> web.Response:
        return _ok(BOT)

    async def _m_setWebhook(self, params: dict[str, Any]) -> web.Response:
        if not params.get("url"):
            return await self._m_deleteWebhook(params)
        secret = params.get("secret_token") or ""
        if secret and not (len(secret) <= 256 and all(c.isalnum() or c in "_-" for c in secret)):
            return _error(400, "Bad Request: secret token contains unallowed characters")
        with self._changed:
            if str(params.get("drop_pending_updates")).lower() == "true":
                self._updates.clear()
            self.webhook = {
                "url": params["url"], "secret_token": secret,
                "allowed_updates": params.get("allowed_updates"),
                "max_connections": int(params.get("max_connections") or 40),
            }  # fmt: skip
            self._changed.notify_all()  # a test waiting for the webhook to be set
        self._wake()
        return _ok(True)

    async def _m_deleteWebhook(self, params: dict[str, Any]) -> web.Response:
        with self._changed:
            if str(params.get("drop_pending_updates")).lower() == "true":
                self._updates.clear()
            self.webhook = None
            self._changed.notify_all()
        return _ok(True)

    async def _m_getWebhookInfo(self, params: dict[str, Any]) -> web.Response:
        with self._changed:
            hook, pending = self.webhook or {}, len(self._updates)
        info = {"url": hook.get("url", ""), "has_custom_certificate": False, "pending_update_count": pending}
        if hook:
            info |= {"max_connections": hook["max_connections"], "allowed_updates": hook["allowed_updates"]}
        return _ok(info)

    async def _m_getUpdates(self, params: dict[str, Any]) -> web.Response:
        with self._changed:
            if self.webhook is not None:
                return _error(
                    409, "Conflict: can't use getUpdates method while webhook is active; "
                    "use deleteWebhook to delete the webhook first",
                )  # fmt: skip
            if self._failing_polls:
                self._failing_polls -= 1
                return _error(502, "Bad Gateway")
        offset = int(params.get("offset") or 0)
        deadline = time.monotonic() + float(params.get("timeout") or 0)
        while True:
            assert self._new_update is not None
            self._new_update.clear()  # before looking, so an update pushed after the look wakes the wait
            with self._changed:
                if offset:  # confirmed: forgotten for good
                    self._updates = [u for u in self._updates if u["update_id"] >= offset]
                fresh = [u for u in self._updates if u["update_id"] >= offset]
            left = deadline - time.monotonic()
            if fresh or left <= 0:
                return _ok(fresh[:100])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new_update.wait(), left)

    def _sent(self, params: dict[str, Any], **extra: Any) -> web.Response:
        chat = int(params["chat_id"])
        thread = int(params["message_thread_id"]) if params.get("message_thread_id") else None
        markup = params.get("reply_markup") or {}
        message = BotMessage(
            chat, next(self._ids), params.get("text", params.get("caption", "")) or "", thread,
            markup.get("inline_keyboard", []), entities=params.get("entities") or [], **extra,
        )  # fmt: skip
        with self._changed:
            self.messages[(chat, message.message_id)] = message
            self._changed.notify_all()
        body: dict[str, Any] = {
            "message_id": message.message_id,
            "date": int(time.time()),
            "chat": {"id": chat, "type": "private"},
            "from": BOT,
            "text": message.text,
        }
        if extra.get("document") is not None:
            body["document"] = {"file_id": "sent", "file_unique_id": "sent", "file_name": message.filename}
        return _ok(body)

    async def _m_sendMessage(self, params: dict[str, Any]) -> web.Response:
        if not params.get("text"):
            return _error(400, "Bad Request: message text is empty")
        if len(params["text"].encode("utf-16-le")) // 2 > 4096:
            return _error(400, "Bad Request: message is too long")
        return self._sent(params)

    async def _m_sendDocument(self, params: dict[str, Any]) -> web.Response:
        data = params.get("document")
        if not isinstance(data, bytes):
            return _error(400, "Bad Request: there is no document in the request")
        return self._sent(params, document=data, filename=params.get("document.filename"))

    async def _m_editMessageText(self, params: dict[str, Any]) -> web.Response:
        with self._changed:
            if self._limited_edits:
                self._limited_edits -= 1
                return _error(429, f"Too Many Requests: retry after {self._retry_after}",
                              {"retry_after": self._retry_after})  # fmt: skip
            found = self.messages.get((int(params["chat_id"]), int(params["message_id"])))
            if found is None:
                return _error(400, "Bad Request: message to edit not found")
            if len(params["text"].encode("utf-16-le")) // 2 > 4096:
                return _error(400, "Bad Request: MESSAGE_TOO_LONG")
            markup = (params.get("reply_markup") or {}).get("inline_keyboard", [])
            if found.text == params["text"] and found.buttons == markup:
                return _error(400, "Bad Request: message is not modified")
            found.text, found.buttons = params["text"], markup
            found.entities = params.get("entities") or []
            found.edits += 1
            self._changed.notify_all()
            body = {"message_id": found.message_id, "date": 0, "chat": {"id": found.chat, "type": "private"}}
        return _ok(body | {"text": found.text, "from": BOT})

    async def _m_getFile(self, params: dict[str, Any]) -> web.Response:
        file_id = params.get("file_id", "")
        if file_id not in self.files:
            return _error(400, "Bad Request: invalid file_id")
        size = len(self.files[file_id])
        return _ok(
            {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_size": size, "file_path": file_id}
        )

    async def _m_sendChatAction(self, params: dict[str, Any]) -> web.Response:
        return _ok(True)

    async def _m_answerCallbackQuery(self, params: dict[str, Any]) -> web.Response:
        return _ok(True)


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(code: int, description: str, parameters: dict[str, Any] | None = None) -> web.Response:
    body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
    if parameters:
        body["parameters"] = parameters
    return web.json_response(body, status=code)
