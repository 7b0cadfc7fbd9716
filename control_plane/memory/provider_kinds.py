"""The built-in memory providers: `semantic` (past messages nearest in meaning), `honcho` (honcho-ai) and
`mem0` (mem0ai, in mem0_provider.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config.memory import HonchoProviderSettings, SemanticProviderSettings
from ..config.settings import Settings
from ..store import Store
from .mem0_provider import Mem0Provider
from .providers import MemoryProvider, Providers, TurnStart


class SemanticProvider(MemoryProvider):
    """The few past messages (one per earlier session) nearest in meaning to the user's message."""

    name = "semantic"

    def __init__(self, settings: SemanticProviderSettings, store: Store) -> None:
        self.settings, self.store = settings, store
        self.timeout, self.max_chars = settings.timeout, settings.max_chars

    def turn_start(self, turn: TurnStart) -> str:
        if self.store.embedder is None:
            raise RuntimeError("semantic recall is off (memory.embeddings.model: off)")
        hits = self.store.search(
            turn.profile,
            turn.text,
            limit=self.settings.limit,
            exclude_session=turn.session_id,
            per_session=True,
            mode="semantic",
        )
        return "\n".join(f"- ({hit.role}, session {hit.session_id}) {hit.snippet}" for hit in hits)


class HonchoProvider(MemoryProvider):
    """Honcho's model of the user: at a turn's start, its representation of the user for the message; the
    user's messages and the session's summary at the end, and USER.md after a write, are sent to it."""

    name = "honcho"

    def __init__(self, settings: HonchoProviderSettings) -> None:
        from honcho import Honcho
        from honcho.http.exceptions import TimeoutError as HonchoTimeout

        self.timeouts = (HonchoTimeout, TimeoutError)
        self.settings = settings
        self.timeout, self.max_chars = settings.timeout, settings.max_chars
        key = settings.api_key.get_secret_value() if settings.api_key else None
        self._client: Any = Honcho(
            base_url=settings.base_url,
            api_key=key,
            workspace_id=settings.workspace,
            timeout=settings.timeout,
            max_retries=0,  # a turn waits for it: one try within the timeout, skipped otherwise
        )

    def turn_start(self, turn: TurnStart) -> str:
        return str(self._client.peer(self.settings.user_peer).representation(search_query=turn.text))

    def after_memory_write(self, profile: str, target: str, entries: list[str]) -> None:
        if target != "user":
            return  # the agent's own notes are not about the user
        session = self._client.session(f"{profile}-user-memory")
        agent = self._client.peer(self.settings.agent_peer)
        text = "What I know about the user now:\n" + "\n".join(f"- {e}" for e in entries)
        session.add_messages([agent.message(text)])

    def session_end(self, profile: str, session_id: str, summary: str, user_messages: list[str]) -> None:
        user, agent = self._client.peer(self.settings.user_peer), self._client.peer(self.settings.agent_peer)
        messages = [user.message(text) for text in user_messages if text.strip()]
        self._client.session(session_id).add_messages([*messages, agent.message(summary)])


def providers_for(settings: Settings, store: Store, redact: Callable[[str], str]) -> Providers:
    built: list[MemoryProvider] = []
    for spec in settings.memory.providers:
        if isinstance(spec, SemanticProviderSettings):
            built.append(SemanticProvider(spec, store))
        elif isinstance(spec, HonchoProviderSettings):
            built.append(HonchoProvider(spec))
        else:
            built.append(Mem0Provider(spec, settings))
    return Providers(built, redact)
