"""The `mem0` memory provider: mem0ai's self-hosted `Memory`, its store in the profile home.

At a session's end mem0's LLM extracts facts about the user from what the user wrote; USER.md's entries
are mirrored into it as they are; at a turn's start the facts nearest in meaning to the message are
injected. The vectors live in an embedded Qdrant (mem0's default store, no server) under
`<home>/mem0/qdrant`, mem0's history in `<home>/mem0/history.db`.

mem0 reads two variables once, when it is first imported: MEM0_TELEMETRY (on unless set: usage events to
PostHog) and MEM0_DIR (default ~/.mem0, where it writes an anonymous id). Both are set before that import:
telemetry off, and the directory in the home of the first profile that opens mem0 in this process; each
profile's data has explicit paths in its own home.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading
from pathlib import Path
from typing import Any

from ..config.memory import Mem0Endpoint, Mem0ProviderSettings
from ..config.settings import Settings
from .providers import MemoryProvider, TurnStart

USER_MD = "USER.md"
"""The `source` of the memories that mirror USER.md's entries."""
MIRRORED_MAX = 200
"""USER.md's entries fetched to compare (it holds a few dozen at most: 1375 characters by default)."""

_stores: dict[Path, tuple[Any, threading.Lock]] = {}
_stores_lock = threading.Lock()


def memory_class(home: Path) -> Any:
    """mem0's `Memory`, imported with telemetry off and its directory in `home` (if not imported yet)."""
    if "mem0" not in sys.modules:
        os.environ["MEM0_TELEMETRY"] = "False"
        os.environ["MEM0_DIR"] = str(home)
    from mem0 import Memory
    from mem0.memory import telemetry

    if telemetry.MEM0_TELEMETRY:
        raise RuntimeError("mem0 was imported with its telemetry on before Hermetic could turn it off")
    return Memory


def _store(path: Path) -> tuple[Any, threading.Lock]:
    """The embedded Qdrant at `path` and the lock its users take: one client per directory in a process, as
    Qdrant's file lock admits one (kept open for the process; another process gets Qdrant's clear error)."""
    with _stores_lock:
        if path not in _stores:
            from qdrant_client import QdrantClient

            if not _stores:
                atexit.register(_close_stores)
            _stores[path] = (QdrantClient(path=str(path)), threading.Lock())
        return _stores[path]


def _close_stores() -> None:
    """At exit, while imports still work: a client left to its finalizer at interpreter shutdown fails
    there (ImportError: sys.meta_path is None) and prints a traceback."""
    with _stores_lock:
        for client, _ in _stores.values():
            client.close()
        _stores.clear()


def _key(endpoint: Mem0Endpoint) -> str | None:
    return endpoint.api_key.get_secret_value() if endpoint.api_key else None


def _client(endpoint: Mem0Endpoint, timeout: float) -> Any:
    from openai import OpenAI

    return OpenAI(api_key=_key(endpoint), base_url=endpoint.api_base, timeout=timeout, max_retries=0)


def _openai_config(endpoint: Mem0Endpoint) -> dict[str, Any]:
    return {"model": endpoint.model, "openai_base_url": endpoint.api_base, "api_key": _key(endpoint)}


class Mem0Provider(MemoryProvider):
    """mem0's memories of the user. mem0 opens on the first hook (under its timeout, so a store or model
    that fails makes that call skipped, with a notice, and the next call tries again)."""

    name = "mem0"

    def __init__(self, spec: Mem0ProviderSettings, settings: Settings) -> None:
        self.spec, self.timeout, self.max_chars = spec, spec.timeout, spec.max_chars
        self.user_id = spec.user_id or settings.profile
        model = settings.model
        self.llm, self.embedder = spec.endpoints(
            model.name, model.api_base, model.api_key, settings.memory.embeddings
        )
        self.dir = settings.home / "mem0"
        self._memory: Any = None
        self._lock = threading.Lock()
        self._opening = threading.Lock()

    def _open(self) -> tuple[Any, threading.Lock]:
        with self._opening:
            if self._memory is None:
                self._memory = self._build()
        return self._memory, self._lock

    def _build(self) -> Any:
        self.dir.mkdir(parents=True, exist_ok=True)
        memory_cls = memory_class(self.dir)
        embeddings = _client(self.embedder, self.timeout)
        probe = embeddings.embeddings.create(
            model=self.embedder.model, input=["dimensions"], encoding_format="float"
        )
        dims = len(probe.data[0].embedding)
        client, self._lock = _store(self.dir / "qdrant")
        # A collection per embedding model and size: vectors of two models never meet
        collection = re.sub(r"[^A-Za-z0-9_-]", "_", f"hermetic_{self.embedder.model}_{dims}")
        memory = memory_cls.from_config(
            {
                "llm": {"provider": "openai", "config": _openai_config(self.llm)},
                "embedder": {"provider": "openai", "config": _openai_config(self.embedder)},
                "vector_store": {
                    "provider": "qdrant",
                    "config": {"client": client, "collection_name": collection, "embedding_model_dims": dims},
                },
                "history_db_path": str(self.dir / "history.db"),
            }
        )
        # mem0 builds its OpenAI clients from the environment too (OPENROUTER_API_KEY sends its LLM calls to
        # OpenRouter whatever the base URL) and with the SDK's 10-minute timeout and retries: it gets
        # clients for the configured servers only, each call bounded by the hook's timeout
        memory.llm.client = _client(self.llm, self.timeout)
        memory.embedding_model.client = embeddings
        return memory

    def turn_start(self, turn: TurnStart) -> str:
        if not turn.text.strip():
            return ""
        memory, lock = self._open()
        with lock:
            found = memory.search(
                turn.text,
                filters={"user_id": self.user_id},
                top_k=self.spec.limit,
                threshold=self.spec.min_score,
            )
        return "\n".join(f"- {hit['memory']}" for hit in found["results"])

    def after_memory_write(self, profile: str, target: str, entries: list[str]) -> None:
        """USER.md's entries, mirrored as they are (added and removed; MEMORY.md, the agent's own notes, is
        not about the user)."""
        if target != "user":
            return
        memory, lock = self._open()
        with lock:
            listed = memory.get_all(filters={"user_id": self.user_id, "source": USER_MD}, top_k=MIRRORED_MAX)
            mirrored = {hit["memory"]: hit["id"] for hit in listed["results"]}
            for entry in entries:
                if entry not in mirrored:
                    memory.add(entry, user_id=self.user_id, metadata={"source": USER_MD}, infer=False)
            for text, memory_id in mirrored.items():
                if text not in entries:
                    memory.delete(memory_id)

    def session_end(self, profile: str, session_id: str, summary: str, user_messages: list[str]) -> None:
        """What the user wrote goes to mem0's extraction (one LLM call); the summary, mostly the agent's own
        words, does not."""
        said = [{"role": "user", "content": text} for text in user_messages if text.strip()]
        if not said:
            return
        memory, lock = self._open()
        with lock:
            memory.add(said, user_id=self.user_id, metadata={"session": session_id})
