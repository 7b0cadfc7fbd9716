"""The slash commands every surface offers (`hermetic chat`, the chat gateway): one implementation.

`run_command(agent, conversation, text, source=...)` returns None when `text` is not a command (it goes
to the model), else what to tell the user and, after /new, the conversation to talk to from now on.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends import SandboxError

from ..memory.store import FILES, MemoryFileError
from ..models.router import Router
from .agent import Agent
from .loop import Conversation

HELP = {
    "/new": "start a new session (this one stays searchable)",
    "/stop": "interrupt the running reply",
    "/status": "profile, session, model, sandbox and tokens",
    "/model": "list the configured models; /model NAME switches this session to NAME",
    "/memory": "what the agent remembers, and how full its memory is",
    "/skills": "the skills the agent has",
    "/help": "this list",
}


@dataclass
class CommandResult:
    text: str
    """What to tell the user."""
    conversation: Conversation | None = None
    """After /new: the session to talk to from now on (the old one is closed)."""


def is_command(text: str) -> bool:
    return text.split(maxsplit=1)[0].split("@", 1)[0].lower() in HELP if text.startswith("/") else False


def run_command(agent: Agent, conversation: Conversation, text: str, *, source: str) -> CommandResult | None:
    """Carry out a slash command; None when `text` is not one. `/name@bot` (Telegram groups) works too."""
    if not is_command(text):
        return None
    head, _, rest = text.partition(" ")
    name, argument = head.split("@", 1)[0].lower(), rest.strip()
    if name == "/help":
        return CommandResult("\n".join(f"{command}  {about}" for command, about in HELP.items()))
    if name == "/new":
        if conversation.running:
            conversation.interrupt()
        conversation.close()
        fresh = agent.new_conversation(source=source)
        return CommandResult(f"New session {fresh.id}. The last one stays searchable.", fresh)
    if name == "/stop":
        return CommandResult("Stopping." if conversation.interrupt() else "Nothing is running.")
    if name == "/status":
        return CommandResult(session_status(agent, conversation))
    if name == "/model":
        return CommandResult(_model(agent, conversation, argument))
    if name == "/memory":
        return CommandResult(_memory(agent))
    return CommandResult(_skills(agent))


def session_status(agent: Agent, conversation: Conversation) -> str:
    record = agent.store.get_session(conversation.id, agent.settings.profile)
    tokens = (record.prompt_tokens + record.completion_tokens) if record else 0
    cost = f", ${record.cost:.4f}" if record and record.cost else ""
    sandbox = agent.sandboxes.peek(conversation.id)
    where = f"sandbox {sandbox.id} on {_backend(agent)}" if sandbox else f"no sandbox yet ({_backend(agent)})"
    state = "running" if conversation.running else "idle"
    return (
        f"session {conversation.id} ({state})\nmodel {conversation.router.settings.name}\n{where}\n"
        f"{tokens:,} tokens{cost}\n{agent.status().line()}"
    )


def _backend(agent: Agent) -> str:
    try:
        return agent.sandboxes.backend.name
    except SandboxError as exc:  # BackendUnavailable among them
        return f"unavailable ({exc})"


def _model(agent: Agent, conversation: Conversation, wanted: str) -> str:
    configured = agent.settings.model
    names = [endpoint.name for endpoint in configured.chain]
    current = conversation.router.settings.name
    if not wanted:
        return "\n".join(f"{'•' if name == current else ' '} {name}" for name in names)
    if wanted not in names:
        return f"No model {wanted!r} is configured; one of: {', '.join(names)}"
    chosen = next(endpoint for endpoint in configured.chain if endpoint.name == wanted)
    others = [endpoint for endpoint in configured.chain if endpoint.name != wanted]
    conversation.router = Router(
        configured.model_copy(
            update={
                "name": chosen.name,
                "api_base": chosen.api_base,
                "api_key": chosen.api_key,
                "fallbacks": others,
            }
        )
    )
    agent.store.update_session(conversation.id, model=wanted)
    return f"This session now uses {wanted}."


def _memory(agent: Agent) -> str:
    parts = []
    for target, file in FILES.items():
        try:
            outcome = agent.memory.read(target)
        except MemoryFileError as exc:
            parts.append(f"{file}: cannot be read ({exc})")
            continue
        parts.append(outcome.message)
    return "\n\n".join(parts)


def _skills(agent: Agent) -> str:
    skills = agent.skills.list_skills()
    if not skills:
        return "No skills yet."
    return "\n".join(f"{info.name}{info.marks}: {info.description}" for info in skills)
