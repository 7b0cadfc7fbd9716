"""Hermetic's questions as `session/request_permission`: an approval (a host for the sandbox's
allowlist, an exposed port) or a clarify question with choices. The editor's pick answers the question;
a cancelled request (the editor's own cancel, or a closed dialog) counts as no. A free-text clarify
question has no permission form: it is declined at once and the agent goes on with its best judgement."""

from __future__ import annotations

import logging

from acp import Client
from acp.schema import AllowedOutcome, PermissionOption, PermissionOptionKind, ToolCallUpdate

from ..agent.loop import Conversation
from ..events import Question

log = logging.getLogger(__name__)
KINDS: dict[str, PermissionOptionKind] = {
    "once": "allow_once",
    "yes": "allow_once",
    "always": "allow_always",
    "no": "reject_once",
}
NAMES = {"once": "Allow once", "yes": "Allow", "always": "Always allow", "no": "Deny"}


async def ask_editor(client: Client, conversation: Conversation, question: Question, call_id: str) -> None:
    """Ask on behalf of the tool call `call_id` (the editor shows the request with that call)."""
    if not question.choices:
        conversation.questions.decline(question.id)
        return
    approval = question.kind == "approval"
    options = [
        PermissionOption(
            option_id=choice,
            name=NAMES.get(choice, choice) if approval else choice,
            kind=KINDS.get(choice, "allow_once") if approval else "allow_once",
        )
        for choice in question.choices
    ]
    try:
        reply = await client.request_permission(
            session_id=conversation.id,
            tool_call=ToolCallUpdate(tool_call_id=call_id, title=question.prompt),
            options=options,
        )
    except Exception:  # the editor failed to answer: no
        log.warning("session/request_permission failed", exc_info=True)
        conversation.questions.decline(question.id)
        return
    outcome = reply.outcome
    if isinstance(outcome, AllowedOutcome) and outcome.option_id in question.choices:
        conversation.answer(question.id, outcome.option_id)
    else:
        conversation.questions.decline(question.id)
