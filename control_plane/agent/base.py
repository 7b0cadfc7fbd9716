"""What every conversation of an agent shares: settings, the store, the model router, the sandboxes,
the tools, memory and skills, and the one writer thread that keeps database writes in order."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..checkpoints import Checkpoints
from ..memory.store import Memory
from ..models.router import Router
from ..safety.redaction import SECRET_NAME, Redactor
from ..sandbox_manager import SandboxManager
from ..settings import Settings
from ..skills.library import SkillLibrary
from ..store import Store
from ..tools import TOOLS, Registry
from .event_log import EventLog
from .learning import Background
from .prompt import system_prompt

log = logging.getLogger("hermetic.agent")


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
        self.store = store or Store(str(settings.database_url))
        self.router = router or Router(settings.model)
        self.sandboxes = sandboxes or SandboxManager(settings)
        self.checkpoints = Checkpoints(self.sandboxes, settings.snapshots)
        self.registry = registry
        self.tools = registry.select(settings.toolsets)
        self.redact = Redactor(_known_secrets(settings))
        self.writer = _Writer()
        self.event_log = EventLog(settings.home)
        self.background = Background()
        """Where learning reviews run, after the reply and apart from the user's turns."""
        self.memory = Memory(settings.home, settings.memory)
        self.skills = SkillLibrary(settings.home / "skills", settings.skills, lambda: self.sandboxes.backend)

    def system_prompt(self, base: str | None = None) -> str:
        """The system prompt with the memory block as it is now. A session builds it once and keeps the
        string byte-identical for every model call (prefix caching); memory written during the session
        shows up in the next one, or after a compression rebuilds it."""
        prompt = f"{base or system_prompt(self.settings)}\n\n{self.memory.snapshot()}"
        listing = self.skills.skills_prompt("") if "skills" in self.settings.toolsets else ""
        return f"{prompt}\n\n{listing}" if listing else prompt

    def close(self) -> None:
        """Finish background reviews, release the sandboxes, flush the database writes."""
        self.background.close()
        self.sandboxes.close_all()
        self.writer.shutdown(wait=True)
        self.event_log.close()
        self.skills.close()


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


def _known_secrets(settings: Settings) -> list[str]:
    """Values the model must never see back: model keys, and sandbox variables named like secrets."""
    keys = [endpoint.api_key.get_secret_value() for endpoint in settings.model.chain if endpoint.api_key]
    given = {
        **{name: os.environ.get(name, "") for name in settings.sandbox.env_allow},
        **settings.sandbox.env,
    }
    return keys + [value for name, value in given.items() if SECRET_NAME.search(name)]
