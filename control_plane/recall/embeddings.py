"""Embedding models: text in, unit-length float32 vectors out, each model named so vectors record it.

The default, WordLlama, needs no service and no download: its small model's weights and tokenizer ship in
the wheel. Any litellm embedding model works by setting (`memory.embeddings.model`).
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..config.memory import EmbeddingSettings

Vectors = npt.NDArray[np.float32]
MAX_CHARS = 2000
"""Characters of a text embedded: a long tool output says what it is about early, and a mean of its
tokens only blurs past that."""
WORDLLAMA = "wordllama"
WORDLLAMA_CONFIG, WORDLLAMA_DIM = "l2_supercat", 256


class EmbeddingError(Exception):
    """The model could not embed the texts (unreachable, refused, malformed answer); nothing was stored."""


class Embedder(Protocol):
    model: str
    """Names the model and its settings exactly: vectors made by one are compared only with its own."""

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit-length row per text, in order. Raises EmbeddingError."""
        ...


class WordLlamaEmbedder:
    """WordLlama's l2_supercat at 256 dimensions, loaded from the files in its wheel without a network.
    Every embedder in a process shares one loaded model (60 MB and 0.3 s each; embedding only reads it)."""

    model = f"{WORDLLAMA}/{WORDLLAMA_CONFIG}-{WORDLLAMA_DIM}"

    def __init__(self) -> None:
        self._model = _wordllama()

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, WORDLLAMA_DIM), np.float32)
        vectors = self._model.embed([t[:MAX_CHARS] for t in texts], norm=True)
        return np.ascontiguousarray(vectors, dtype=np.float32)


_loading = threading.Lock()


@functools.cache
def _load_wordllama() -> Any:
    """wordllama 0.4 looks for its shipped tokenizer under `tokenizer/` while the wheel has it under
    `tokenizers/`, and then downloads it; a cache directory holding the shipped file, with downloads
    disabled, loads exactly the shipped files."""
    import wordllama
    from wordllama import WordLlama

    shipped = Path(wordllama.__file__).parent / "tokenizers"
    with tempfile.TemporaryDirectory(prefix="hermetic-wordllama-") as cache:
        shutil.copytree(shipped, Path(cache) / "tokenizers")
        return WordLlama.load(WORDLLAMA_CONFIG, cache_dir=cache, dim=WORDLLAMA_DIM, disable_download=True)


def _wordllama() -> Any:
    with _loading:  # profiles opened at once in two request threads load it once
        return _load_wordllama()


class LiteLLMEmbedder:
    """Any embedding model litellm reaches: hosted, or a local OpenAI-compatible server (`api_base`)."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        self.model = settings.model
        self._settings = settings

    def embed(self, texts: Sequence[str]) -> Vectors:
        from ..models.router import _litellm

        litellm = _litellm()  # offline price list, quiet
        if not texts:
            return np.zeros((0, 0), np.float32)
        key = self._settings.api_key
        try:
            answer: Any = litellm.embedding(
                model=self.model,
                input=[t[:MAX_CHARS] or " " for t in texts],
                api_base=self._settings.api_base,
                api_key=key.get_secret_value() if key else None,
                timeout=self._settings.timeout,
                max_retries=0,  # the indexer retries a failed batch itself, later
            )
            rows = sorted(answer.data, key=lambda item: item["index"])
            vectors = np.array([row["embedding"] for row in rows], dtype=np.float32)
        except Exception as exc:  # litellm raises its own many kinds; all mean "not embedded"
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise EmbeddingError(f"{self.model}: {first}") from exc
        if vectors.ndim != 2 or len(vectors) != len(texts) or not vectors.shape[1]:
            raise EmbeddingError(f"{self.model} answered {vectors.shape} vectors for {len(texts)} texts")
        return normalized(vectors)


def normalized(vectors: Vectors) -> Vectors:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.ascontiguousarray(vectors / np.maximum(norms, 1e-12), dtype=np.float32)


def embedder_for(settings: EmbeddingSettings) -> Embedder | None:
    """The configured model, or None when semantic recall is off."""
    if settings.model == "off":
        return None
    if settings.model == WORDLLAMA:
        return WordLlamaEmbedder()
    return LiteLLMEmbedder(settings)
