"""What every conversation of an agent shares: settings, the store, the model router, the sandboxes,
the tools, memory and skills, and the one writer thread that keeps database writes in order."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from backends import SandboxError

from ..checkpoints import Checkpoints
from ..config.keys import read_env_file
from ..config.settings import Settings
from ..memory.persona import load_persona, persona_block, soul_path
from ..memory.provider_kinds import providers_for
from ..memory.providers import TurnStart
from ..memory.store import FILES, Memory, MemoryFileError
from ..models.router import Router
from ..safety.redaction import SECRET_NAME, Redactor
from ..sandbox_manager import SandboxManager
from ..skills.library import SkillLibrary
from ..store import Store
from ..store.bindings import Bindings
from ..store.configured import open_store
from ..store.profile_lock import ProfileLock
from ..tools import TOOLS, Registry
from .event_log import EventLog
from .learning import Background
from .prompt import system_prompt
from .status import Status

if TYPE_CHECKING:
    from ..tools.mcp_client import McpServers

log = logging.getLogger("hermetic.agent")
MAX_TOLD = 50
"""The user's latest messages of a session told to the memory providers when it ends."""


class AgentBase:
    """What conversations share: settings, the store, the model router, the sandboxes and the tools."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        router: Router | None = None,
        sandboxes: SandboxManager | None = None,
        registry: Registry = TOOLS,
    ) -> None:
        self.settings = settings
        self.store = store or open_store(settings)
        self._own_indexer = store is None and self.store.indexer is not None
        self.bindings = Bindings(self.store.engine, settings.profile)
        """Which session each outside conversation (a chat, a /v1 conversation, an A2A context, an MCP
        client) is talking to."""
        self.router = router or Router(settings.model)
        self.sandboxes = sandboxes or SandboxManager(settings)
        self._own_sandboxes = sandboxes is None
        """Sandboxes shared with another agent (a served profile's) are that agent's to close."""
        self.checkpoints = Checkpoints(self.sandboxes, settings.snapshots)
        self.registry = registry
        self.tools = registry.select(settings.toolsets)
        self.mcp: McpServers | None = None
        """The configured MCP servers, whose tools join `tools` (the SDK loads only when there are some)."""
        if settings.mcp_servers:
            from ..tools.mcp_client import McpServers

            self.mcp = McpServers(settings, self.sandboxes)
            self.tools.update(self.mcp.tools())
        self.redact = Redactor(known_secrets(settings))
        self.writer = _Writer()
        self.event_log = EventLog(settings.home)
        self.background = Background()
        """Where learning reviews run, after the reply and apart from the user's turns."""
        self.locks = ProfileLock(settings.home, settings.profile, self.store.engine)
        """Memory and skill-library writes, one process (one replica) at a time."""
        self.memory = Memory(settings.home, settings.memory, self.locks)
        self.providers = providers_for(settings, self.store, self.redact)
        self.memory.on_write.append(
            lambda target, entries: self.providers.after_memory_write(settings.profile, target, entries)
        )
        self.skills = SkillLibrary(
            settings.home / "skills",
            settings.skills,
            lambda: self.sandboxes.backend,
            pool=lambda: self.sandboxes.throwaways,
            lock=self.locks,
        )
        self.skills.embedder = self.store.embedder

    def turn_text(self, session_id: str, text: str) -> tuple[str, list[str]]:
        """The user's message as the model is sent it (the memory providers' context and, in a large skill
        library, the skills relevant to it first; the database keeps the message as written) and the
        providers' notices. Built once per turn, so every model call of the turn sends the same text."""
        context, notices = self.providers.turn_start(TurnStart(self.settings.profile, session_id, text))
        skills = self.skills.relevant_listing(text) if "skills" in self.settings.toolsets else ""
        return "\n\n".join(part for part in (context, skills, text) if part), notices

    def end_session(self, session_id: str) -> None:
        """Mark the session ended and tell the memory providers (its title, first and last exchanges, and
        what the user wrote)."""
        self.store.update_session(session_id, ended_at=time.time())
        if not self.providers.providers:
            return
        record = self.store.get_session(session_id, self.settings.profile)
        first, last = self.store.session_edges(session_id)
        lines = [f"Session {record.title if record and record.title else session_id}:"]
        lines += [f"{m.role}: {' '.join((m.content or '').split())[:300]}" for m in first + last]
        said = [m.content or "" for m in self.store.messages(session_id) if m.role == "user"][-MAX_TOLD:]
        self.providers.session_end(self.settings.profile, session_id, "\n".join(lines), said)

    def system_prompt(self, base: str | None = None) -> str:
        """The system prompt with the persona and the memory block as they are now. A session builds it
        once and keeps the string byte-identical for every model call (prefix caching); memory written
        during the session shows up in the next one, or after a compression rebuilds it. A fork with a
        prompt of its own (a learning review) gets no persona."""
        persona = "" if base else persona_block(load_persona(self.settings.home))
        listing = self.skills.skills_prompt("") if "skills" in self.settings.toolsets else ""
        sections = [base or system_prompt(self.settings), persona, self.memory.snapshot(), listing]
        return "\n\n".join(section for section in sections if section)

    def problems(self) -> list[str]:
        """What to tell the user when a session starts: withheld memory entries and persona lines, MCP
        servers that did not start."""
        persona = load_persona(self.settings.home)
        found = self.memory.problems() + (persona.problems(soul_path(self.settings.home)) if persona else [])
        return found + (self.mcp.problems if self.mcp else [])

    def status(self) -> Status:
        """What surfaces show when a session opens (`hermetic chat`, `run`, /health)."""
        try:
            backend = self.sandboxes.backend.name
        except SandboxError as exc:  # the status says so; the session still opens (tools will say why)
            backend = f"unavailable ({exc})"
        memory: dict[str, float | None] = {}
        for target, name in FILES.items():
            try:
                memory[name] = self.memory.read(target).usage.percent
            except MemoryFileError:
                memory[name] = None
        return Status(
            profile=self.settings.profile,
            model=self.settings.model.name or "none",
            backend=backend,
            memory_percent=memory,
            skills=len(self.skills.list_skills()),
            limits=self._limits(),
        )

    def _limits(self) -> dict[str, float | int | str | None]:
        sandbox = self.settings.sandbox
        sandbox_limits = {
            "cpus": sandbox.cpus, "memory": sandbox.memory, "pids": sandbox.pids, "disk": sandbox.disk,
            "ttl": sandbox.ttl, "idle_seconds": sandbox.idle_seconds, "output_limit": sandbox.output_limit,
        }  # fmt: skip
        return {f"limits.{name}": value for name, value in self.settings.limits.model_dump().items()} | {
            f"sandbox.{name}": value for name, value in sandbox_limits.items()
        }

    def close(self) -> None:
        """Finish background reviews, release its own sandboxes, flush the database writes."""
        self.background.close()
        if self.mcp is not None:
            self.mcp.close()
        if self._own_sandboxes:
            self.sandboxes.close_all()
        self.writer.shutdown(wait=True)
        self.event_log.close()
        self.skills.close()
        if self._own_indexer and self.store.indexer:
            self.store.indexer.stop()  # its background thread; the store stays readable


class _Writer(ThreadPoolExecutor):
    """One thread that performs the database writes in submission order, keeping what failed."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="hermetic-store")
        self.errors: list[str] = []
        self.lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        def guarded() -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                log.exception("database write failed")
                with self.lock:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                return None

        return super().submit(guarded)


def known_secrets(settings: Settings) -> list[str]:
    """Values the model must never see back: model keys, the profile's .env, and sandbox variables named
    like secrets."""
    keys = [endpoint.api_key.get_secret_value() for endpoint in settings.model.chain if endpoint.api_key]
    keys += settings.web.search.keys()
    given = {
        **{name: os.environ.get(name, "") for name in settings.sandbox.env_allow},
        **settings.sandbox.env,
    }
    # every value of the profile's .env is a key by definition (that file is where keys go)
    stored = read_env_file(settings.home)
    stored_values = [*stored.values(), *(os.environ.get(name, "") for name in stored)]
    return keys + stored_values + [value for name, value in given.items() if SECRET_NAME.search(name)]
