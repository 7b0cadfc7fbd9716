"""The gateway: one agent, every chat platform. The work every adapter shares lives here: each inbound
message stored before the platform is acknowledged (so none is lost or answered twice), who may talk,
a session per chat / thread / group user, the chat commands, steering, replies streamed by edit,
progress lines, approval buttons, files, one gateway per bot token, and reconnecting with backoff.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from functools import partial

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_exponential_jitter

from ..agent.agent import Agent
from ..agent.commands import is_command, run_command
from ..agent.loop import Busy, Conversation
from ..config.chat import ChatAccess, GatewaySettings
from ..store.bindings import ResetPolicy
from ..workers import ready_to_serve
from .access import Decision, decide, pairing_text
from .base import Adapter, AdapterError, ConnectionLost, Inbound
from .deliveries import register as offer_deliveries
from .files import chat_sender, take_file
from .ordered import PerChat
from .records import GatewayLocked, GatewayStore, InboundRecord
from .status import PlatformStatus
from .stream import LiveMessage
from .turn import Chat, Turn

log = logging.getLogger("hermetic.gateway")
TYPING_RENEWAL = 20.0
"""Seconds between typing indicators while a reply that cannot stream is written (WhatsApp drops one
after 25 s): the chat shows the reply coming until it arrives whole."""
CLOSED = "This question is no longer open here (answered, timed out, or not yours)."
"""What a press that changed nothing tells the presser, where the platform lets only them see it."""


class Gateway:
    def __init__(self, agent: Agent, adapters: list[Adapter], store: GatewayStore | None = None) -> None:
        self.agent = agent
        self.settings: GatewaySettings = agent.settings.gateway
        self.adapters = {adapter.platform: adapter for adapter in adapters}
        self.store = store or GatewayStore(str(agent.settings.database_url))
        self._reset = ResetPolicy(self.settings.reset, self.settings.idle_hours)
        self.holder = f"{uuid.uuid4().hex[:12]}"
        self.status = {name: PlatformStatus(platform=name) for name in self.adapters}
        self._chats: dict[str, Chat] = {}
        self._arrivals = PerChat()
        self._tasks: list[asyncio.Task[None]] = []
        self._locks: list[str] = []

    def _take_over_chats(self) -> None:
        """Bind the chats an older release kept in its own table again, then drop that table."""
        rows = self.store.take_over_chats()
        if rows:
            self.agent.bindings.take_over("gateway", rows)
            self.store.drop_chats()

    def config(self, platform: str) -> ChatAccess:
        return self.settings.platforms.get(platform) or ChatAccess()

    # -- lifetime ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Take each bot token's lock (GatewayLocked when another gateway has it), then connect to every
        platform and, once connected, answer what was stored but never answered, then receive."""
        await ready_to_serve()
        for adapter in self.adapters.values():
            name = adapter.lock_name
            if name is None:
                continue
            held = await asyncio.to_thread(self.store.acquire, name, self.holder, self.settings.lock_ttl)
            if held is not None:
                await self.stop()
                raise GatewayLocked(
                    f"another gateway is running for this {adapter.platform} bot (pid {held.pid} on "
                    f"{held.host}); one gateway per bot token: stop that one first"
                )
            self._locks.append(name)
        if self._locks:
            self._tasks.append(asyncio.create_task(self._heartbeat()))
        await asyncio.to_thread(self._take_over_chats)
        offer_deliveries(self.adapters.values(), self.origin_of)
        for adapter in self.adapters.values():
            self._tasks.append(asyncio.create_task(self._keep_receiving(adapter)))

    async def _answer_unanswered(self, adapter: Adapter) -> None:
        """Route what was stored but never answered (a crash, a kill), before anything received now."""
        for record in await asyncio.to_thread(self.store.unanswered, adapter.platform):
            assert record.id is not None  # a stored row
            if not adapter.streams and (record.state == "replying" or record.reply_id):
                # no edits: a rerun could only send a second reply, so one that may be out stays
                log.warning("%s: the reply to %s may be out: not sent again", record.platform, record.id)
                await asyncio.to_thread(self.store.mark, record.id, state="answered")
                continue
            self._route(adapter, Inbound.model_validate(record.payload), record)

    async def stop(self) -> None:
        """Stop receiving, interrupt running turns (their messages stay unanswered, so the next start
        answers them), release the locks."""
        tasks = self._tasks + [chat.worker for chat in self._chats.values() if chat.worker]
        for chat in self._chats.values():
            if chat.conversation is not None:
                chat.conversation.interrupt()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks = []
        for adapter in self.adapters.values():
            try:
                await adapter.disconnect()
            except Exception as exc:
                log.warning("%s: disconnect failed: %s", adapter.platform, exc)
        for name in self._locks:
            await asyncio.to_thread(self.store.release, name, self.holder)
        self._locks = []
        for platform, status in self.status.items():
            if status.state != "stopped":  # a platform stopped by a bad token keeps its error's time
                status.stopped()
                await asyncio.to_thread(self._save_status, platform)
        for chat in self._chats.values():
            if chat.conversation is not None:
                await asyncio.to_thread(chat.conversation.close)
        self._chats = {}

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lock_ttl / 3)
            for name in self._locks:
                if not await asyncio.to_thread(self.store.renew, name, self.holder, self.settings.lock_ttl):
                    log.error("lost the lock %s: another gateway took over this bot token", name)

    async def _keep_receiving(self, adapter: Adapter) -> None:
        """Connect and receive; a dropped connection or a 5xx reconnects with backoff (tenacity), and
        only this platform waits."""
        status = self.status[adapter.platform]

        def failed(retry: RetryCallState) -> None:
            error = retry.outcome.exception() if retry.outcome else None
            status.failed(f"{type(error).__name__}: {error}")
            if isinstance(error, ConnectionLost):
                log.warning("%s: %s; reconnecting", adapter.platform, error)
            else:  # a bug (ours or the client library's): said in full, then the platform is retried
                log.error("%s failed; reconnecting", adapter.platform, exc_info=error)
            self._save_status(adapter.platform)

        retrying = AsyncRetrying(
            retry=retry_if_exception(_worth_retrying),
            wait=wait_exponential_jitter(multiplier=0.2, max=self.settings.reconnect_max),
            before_sleep=failed,
            reraise=True,
        )
        unanswered = True
        try:
            async for attempt in retrying:
                with attempt:
                    await adapter.connect()
                    status.connected()
                    self._save_status(adapter.platform)
                    # once the platform can take their replies (a fast model's beat Matrix's login)
                    if unanswered:
                        await self._answer_unanswered(adapter)
                        unanswered = False
                    await adapter.receive(lambda message: self._deliver(adapter, message))
        except AdapterError as exc:  # a bad token: reconnecting cannot help
            status.failed(f"stopped: {exc}")
            self._save_status(adapter.platform)
            log.error("%s: %s; this platform is stopped", adapter.platform, exc)

    def _save_status(self, platform: str) -> None:
        self.store.set_state(f"status:{platform}", self.status[platform].model_dump_json())

    # -- inbound -----------------------------------------------------------------------------

    async def _deliver(self, adapter: Adapter, message: Inbound) -> bool:
        """Store the message (the adapter acknowledges it once this returns), then route it. False for a
        message stored before (a redelivery). A chat's messages delivered at once (webhooks, a task per
        frame) are stored and routed in the order they came, though the store runs in a worker thread; one
        whose chat's earlier message failed is refused too (NotStored), so the platform redelivers both."""
        chat = f"{message.platform}:{message.chat}"
        return await self._arrivals.submit(chat, partial(self._store_and_route, adapter, message))

    async def _store_and_route(self, adapter: Adapter, message: Inbound) -> bool:
        taken = await asyncio.to_thread(self._take, adapter, message)
        if taken is None:
            log.info("%s: message %s seen before (a redelivery)", message.platform, message.message_id)
            return False
        stored, decision = taken
        if decision is not None and decision.verdict != "allow":
            if message.button is not None:
                await adapter.settle_press(message, None)
            if decision.code is not None:
                text = pairing_text(decision.code, self.settings.pairing_ttl)
                asyncio.create_task(self._say(adapter, message, text))
            return True
        record = InboundRecord(
            id=stored, platform=message.platform, chat=message.chat, message_id=message.message_id,
            payload={}, received_at=time.time(),
        )  # fmt: skip
        self._route(adapter, message, record)
        return True

    def _take(self, adapter: Adapter, message: Inbound) -> tuple[int, Decision | None] | None:
        """In one worker thread, since each hop to one waits behind every other chat's work on the loop:
        store the message and decide whether to answer it (a refusal is marked so). None for a message
        stored before; the decision is None where the adapter authenticates every request."""
        stored = self.store.receive(message.platform, message.chat, message.message_id, message.model_dump())
        if stored is None:
            return None
        if adapter.authenticates:
            return stored, None
        decision = decide(self.store, self.config(message.platform), message, self.settings.pairing_ttl)
        if decision.verdict != "allow":
            self.store.mark(stored, state="refused")
        return stored, decision

    def origin_of(self, session_id: str) -> str | None:
        """The chat a session of this gateway talks in, as a delivery target (the scheduler's `here`)."""
        return next(
            (c.target for c in self._chats.values() if c.conversation and c.conversation.id == session_id),
            None,
        )

    def chat_key(self, message: Inbound) -> str:
        key = f"{message.platform}:{message.chat}"
        if message.thread:
            return f"{key}:t{message.thread}"
        if not message.direct and self.config(message.platform).session_per_user_in_groups:
            return f"{key}:u{message.user}"
        return key

    def _route(self, adapter: Adapter, message: Inbound, record: InboundRecord) -> None:
        """Buttons, commands and steers act at once; other messages wait for the chat's turn, in order."""
        assert record.id is not None
        target = f"{message.platform}:{message.chat}" + (f":{message.thread}" if message.thread else "")
        chat = self._chats.setdefault(self.chat_key(message), Chat(self.chat_key(message), target))
        running = chat.conversation is not None and chat.conversation.running
        if message.button is not None or (running and (is_command(message.text) or chat.free_text_question)):
            asyncio.create_task(self._at_once(adapter, chat, message, record.id))
            return
        # a steer joins the running turn at once: only when no earlier message of the chat still waits
        conversation = chat.conversation if running and chat.queue.empty() and not message.files else None
        if conversation is not None and conversation.steer(message.text):
            chat.steered.append(record.id)
            self.store.mark(record.id, state="running", session_id=conversation.id)
            return
        chat.queue.put_nowait((adapter, message, record.id))
        if chat.worker is None or chat.worker.done():
            chat.worker = asyncio.create_task(self._work(chat))

    async def _work(self, chat: Chat) -> None:
        while not chat.queue.empty():
            adapter, message, inbound_id = chat.queue.get_nowait()
            try:
                await self._answer(adapter, chat, message, inbound_id)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never silence: the chat hears that something broke
                log.exception("%s chat %s: answering failed", message.platform, message.chat)
                await self._say(adapter, message, f"Sorry, that failed: {type(exc).__name__}: {exc}")
                await asyncio.to_thread(self.store.mark, inbound_id, state="answered")

    async def _at_once(self, adapter: Adapter, chat: Chat, message: Inbound, inbound_id: int) -> None:
        conversation = chat.conversation
        if message.button is not None:
            await adapter.settle_press(message, self._press(message, conversation))
        elif chat.free_text_question and conversation is not None and not is_command(message.text):
            try:
                conversation.answer(chat.free_text_question, message.text.strip())
                chat.free_text_question = None
            except ValueError as exc:  # not one of the choices: ask again
                await self._say(adapter, message, str(exc))
        elif conversation is not None:
            await self._command(adapter, chat, message, conversation)
        await asyncio.to_thread(self.store.mark, inbound_id, state="answered")

    @staticmethod
    def _press(message: Inbound, conversation: Conversation | None) -> str | None:
        """Answer the question a button names; None when that took effect, else why it did not."""
        assert message.button is not None
        kind, _, rest = message.button.partition(":")
        question_id, _, answer = rest.partition(":")
        if kind != "q" or conversation is None:
            log.warning("%s chat %s: a press of no running session's button", message.platform, message.chat)
            return CLOSED
        try:
            if conversation.answer(question_id, answer):
                return None
        except ValueError as exc:
            log.warning("%s: bad button answer: %s", message.platform, exc)
            return str(exc)
        log.info("%s: a button for question %s, which is no longer open", message.platform, question_id)
        return CLOSED

    async def _command(
        self, adapter: Adapter, chat: Chat, message: Inbound, conversation: Conversation
    ) -> None:
        done = await asyncio.to_thread(
            run_command, self.agent, conversation, message.text, source=message.platform
        )
        if done is None:
            return
        if done.conversation is not None:
            chat.conversation = done.conversation
            await asyncio.to_thread(self.agent.bindings.bind, "gateway", chat.key, done.conversation.id)
        await self._say(adapter, message, done.text)

    # -- a turn ------------------------------------------------------------------------------

    def _session(self, chat: Chat, message: Inbound) -> Conversation:
        """(In a worker thread.) The chat's session: the current one, unless the reset policy says a new
        one begins; bound to the chat, marked used now."""
        bindings = self.agent.bindings
        bound = bindings.current("gateway", chat.key, self._reset)
        conversation = chat.conversation
        fresh = bound is None
        if bound is not None and (conversation is None or conversation.id != bound):
            try:
                conversation = self.agent.resume(bound)
            except KeyError:
                fresh = True
        if fresh:
            if chat.conversation is not None:
                chat.conversation.close()
            title = f"{message.platform} {message.user_name or message.chat}"
            conversation = self.agent.new_conversation(title=title, source=message.platform)
        assert conversation is not None
        bindings.bind("gateway", chat.key, conversation.id)
        return conversation

    def _begin(self, chat: Chat, message: Inbound, inbound_id: int) -> tuple[Conversation, str | None]:
        """(In one worker thread.) The session, and the message marked running in it; the reply a killed
        run began, to edit."""
        conversation = self._session(chat, message)
        stored = self.store.inbound(inbound_id)
        self.store.mark(inbound_id, state="running", session_id=conversation.id)
        return conversation, stored.reply_id if stored else None

    async def _answer(self, adapter: Adapter, chat: Chat, message: Inbound, inbound_id: int) -> None:
        if is_command(message.text):
            chat.conversation = await asyncio.to_thread(self._session, chat, message)
            await self._command(adapter, chat, message, chat.conversation)
            await asyncio.to_thread(self.store.mark, inbound_id, state="answered")
            return
        # the typing indicator goes out beside the turn's set-up and model call, not before them: a round
        # trip to the platform (behind every other chat's edits) on the way to the model otherwise
        typing = asyncio.ensure_future(adapter.typing(message.chat, thread=message.thread))
        conversation, reply_id = await asyncio.to_thread(self._begin, chat, message, inbound_id)
        chat.conversation = conversation
        text = message.text
        config = self.config(message.platform)
        for attachment in message.files:
            note, refusal = await take_file(
                adapter, attachment, config.max_file_bytes, lambda: self.agent.sandboxes.get(conversation.id)
            )
            text += note
            if refusal is not None:
                await self._say(adapter, message, refusal)
        turn = Turn(self.store, adapter, chat, message, config, reply_id, inbound_id, typing)
        send_file = chat_sender(
            asyncio.get_running_loop(),
            lambda path: adapter.send_file(message.chat, path, thread=message.thread),
        )
        renewal = None if adapter.streams else asyncio.create_task(_renew_typing(adapter, message))
        try:
            end = await conversation.run(
                text.strip() or "(an empty message)", turn.on_event, send_file=send_file
            )
        except Busy:
            conversation.steer(text)
            chat.steered.append(inbound_id)
            return
        finally:
            if renewal is not None:
                renewal.cancel()
        await turn.finish(end)
        done, chat.steered = [inbound_id, *chat.steered], []
        await asyncio.to_thread(self._answered, done)

    def _answered(self, done: list[int]) -> None:
        """(In one worker thread.) The turn's messages marked answered."""
        for inbound_id in done:
            self.store.mark(inbound_id, state="answered")

    async def _say(self, adapter: Adapter, message: Inbound, text: str) -> None:
        """A plain message (a command's answer, a pairing code); failures are logged, not raised."""
        try:
            await LiveMessage(adapter, message.chat, thread=message.thread).finish(text)
        except (AdapterError, ConnectionLost) as exc:
            log.warning("%s chat %s: cannot send: %s", message.platform, message.chat, exc)


async def _renew_typing(adapter: Adapter, message: Inbound) -> None:
    """The typing indicator shown again every TYPING_RENEWAL seconds until cancelled: for a reply that
    cannot stream (a streamed one shows itself coming)."""
    while True:
        await asyncio.sleep(TYPING_RENEWAL)
        await adapter.typing(message.chat, thread=message.thread)


def _worth_retrying(error: BaseException) -> bool:
    """Anything but a refusal (a bad token) or a cancellation (the gateway stopping): connect again."""
    return isinstance(error, Exception) and not isinstance(error, AdapterError)
