"""The sessions database as the settings configure it: with the embedding model, or keyword-only."""

from __future__ import annotations

from ..config.settings import Settings
from ..recall.embeddings import embedder_for
from .store import Store


def open_store(settings: Settings, *, semantic: bool = True, background: bool = True) -> Store:
    """The profile's store; with `semantic` (and a model configured) messages are embedded in the
    background and searches may be semantic or hybrid."""
    config = settings.memory.embeddings
    embedder = embedder_for(config) if semantic else None
    return Store(
        str(settings.database_url),
        embedder=embedder,
        embed_batch=config.batch,
        min_similarity=config.min_similarity,
        background=background,
    )
