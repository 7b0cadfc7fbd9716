"""One chat's state (its session, the messages waiting for it) and what one run shows there: the reply
streamed by edit, progress lines, question buttons, the images a tool returned."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from ..agent.display import describe_call
from ..agent.loop import Conversation
from ..config.chat import ChatAccess
from ..events import Answered, Error, Event, Question, TextDelta, ToolEnd, ToolStart, TurnEnd, UserMessage
from .base import Adapter, AdapterError, Button, ConnectionLost, Inbound
from .files import send_images
from .records import GatewayStore
from .stream import LiveMessage, patiently

log = logging.getLogger("hermetic.gateway")


@dataclass
class Chat:
    """One chat's (thread's, group user's) session and the messages waiting for it, answered in order."""

    key: str
    target: str = ""
    """Where deliveries to this chat go: platform:chat[:thread]."""
    conversation: Conversation | None = None
    queue: asyncio.Queue[tuple[Adapter, Inbound, int]] = field(default_factory=asyncio.Queue)
    worker: asyncio.Task[None] | None = None
    steered: list[int] = field(default_factory=list)
    """Stored messages folded into the running turn; answered when it ends."""
    free_text_question: str | None = None
    """An open clarifying question without choices: the next message answers it."""


class Turn:
    """What one run shows in the chat: the reply streamed by edit, progress lines, question buttons."""

    def __init__(
        self,
        store: GatewayStore,
        adapter: Adapter,
        chat: Chat,
        message: Inbound,
        config: ChatAccess,
        reply_id: str | None,
        inbound_id: int,
        typing: asyncio.Future[None] | None = None,
    ) -> None:
        self.store, self.adapter, self.chat, self.message, self.config = (
            store,
            adapter,
            chat,
            message,
            config,
        )
        self.inbound_id = inbound_id
        self.reply = LiveMessage(
            adapter,
            message.chat,
            thread=message.thread,
            interval=config.edit_interval,
            message_id=reply_id,
            on_sent=lambda sent: store.mark(inbound_id, reply_id=sent),
            after=typing,
        )
        self.typing = typing
        self.progress: LiveMessage | None = None
        self.lines: deque[str] = deque(maxlen=30)
        self.last_tool: str | None = None
        self.text = ""
        self.errors: list[str] = []
        self.questions: dict[str, tuple[Question, str | None]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.images: list[asyncio.Task[list[str]]] = []
        """Tool results' images on their way to the chat: each says what could not be sent."""

    def on_event(self, event: Event) -> None:
        match event:
            case TextDelta(text=piece):
                self.text += piece
                if self.adapter.streams:
                    self.reply.show(self.text)
            case UserMessage(steer=True):
                self._paragraph()
            case ToolStart(name=name, arguments=arguments):
                self._progress(name, arguments)
                self._paragraph()
            case Error(message=text):
                self.errors.append(text)
            case ToolEnd(images=images) if images:
                message = self.message
                self.images.append(
                    asyncio.create_task(send_images(self.adapter, message.chat, message.thread, images))
                )
            case Question():
                self._keep(asyncio.create_task(self._ask(event)))
            case Answered():
                self._keep(asyncio.create_task(self._answered(event)))

    def _keep(self, task: asyncio.Task[None]) -> None:
        """The loop holds tasks weakly: a reference until each is done, so none is collected mid-send."""
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _paragraph(self) -> None:
        """The next step's text starts a paragraph of its own."""
        if self.text and not self.text.endswith("\n\n"):
            self.text = self.text.rstrip("\n") + "\n\n"

    def _progress(self, name: str, arguments: dict[str, Any] | str) -> None:
        mode = self.config.progress
        if mode == "off" or (mode == "new" and name == self.last_tool) or not self.adapter.streams:
            return
        self.last_tool = name
        self.lines.append(f"▸ {describe_call(name, arguments)}")
        if self.progress is None:
            self.progress = LiveMessage(
                self.adapter,
                self.message.chat,
                thread=self.message.thread,
                interval=self.config.edit_interval,
                after=self.typing,
            )
        self.progress.show("\n".join(self.lines))

    async def _ask(self, question: Question) -> None:
        buttons = [
            Button(label=choice, data=f"q:{question.id}:{choice}", tone=_tone(question, choice))
            for choice in question.choices
        ]
        if not self.adapter.buttons_in(self.message):
            buttons = []
        listed = f" ({', '.join(question.choices)})" if question.choices else ""
        text = question.prompt
        if not buttons:
            text += f"\n(reply with your answer{listed})"
        elif self.adapter.replies_answer:
            text += f"\n(press one, or reply with your answer{listed})"
        if not buttons or self.adapter.replies_answer:
            self.chat.free_text_question = question.id
        try:
            sent = await patiently(
                lambda: self.adapter.send(
                    self.message.chat, text, thread=self.message.thread, buttons=buttons
                )
            )
        except (AdapterError, ConnectionLost) as exc:
            log.warning("cannot ask in %s chat %s: %s", self.message.platform, self.message.chat, exc)
            sent = None
        self.questions[question.id] = (question, sent)

    async def _answered(self, answered: Answered) -> None:
        await asyncio.sleep(0)  # let the question's own send go first
        question, sent = self.questions.pop(answered.id, (None, None))
        if self.chat.free_text_question == answered.id:
            self.chat.free_text_question = None
        if question is None or sent is None:
            return
        outcome = (
            answered.answer if answered.answer is not None else f"no answer ({answered.by}): treated as no"
        )
        try:
            await patiently(
                lambda: self.adapter.edit(self.message.chat, sent, f"{question.prompt}\n→ {outcome}")
            )
        except (AdapterError, ConnectionLost) as exc:
            log.warning("cannot update the question in %s: %s", self.message.chat, exc)

    async def finish(self, end: TurnEnd) -> None:
        text = self.text.strip() or end.content
        unsent = [line for lines in await asyncio.gather(*self.images) for line in lines]
        text = "\n".join([text, *unsent]).strip()
        if end.reason == "error":
            gist = (self.errors[-1] if self.errors else "the run failed").splitlines()[0][:300]
            text = f"{text}\n\n⚠ Sorry, I could not finish: {gist}".strip()
        elif end.reason == "interrupted":
            text = f"{text}\n\n(stopped)".strip()
        elif end.reason == "budget":
            text = f"{text}\n\n(stopped at the step limit; send a message to go on)".strip()
        if self.progress is not None:
            await self.progress.finish("\n".join(self.lines))
        if not self.adapter.streams:  # sent whole, never edited: from here on a restart must not rerun
            for inbound_id in (self.inbound_id, *self.chat.steered):
                await asyncio.to_thread(self.store.mark, inbound_id, state="replying")
        await self.reply.finish(text or "(no reply)")


def _tone(question: Question, choice: str) -> Literal["neutral", "approve", "deny"]:
    if question.kind != "approval":
        return "neutral"
    return "deny" if choice == "no" else "approve"
