"""Settings of the memory layers: semantic recall's embedding model and the memory providers."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator


class EmbeddingSettings(BaseModel):
    """The model that turns messages into vectors for semantic recall (docs/recall-and-providers.md)."""

    model_config = ConfigDict(extra="forbid")

    model: str = "wordllama"
    """"wordllama" (embedded, offline, CPU), "off" (keyword recall only), or a litellm embedding model
    ("openai/text-embedding-3-small"). Changing it re-embeds every message in the background."""
    api_base: str | None = None
    """Server URL for a litellm model served locally (an OpenAI-compatible /v1/embeddings)."""
    api_key: SecretStr | None = None
    """Key for a litellm model; default: the provider's usual variable."""
    batch: int = Field(64, ge=1, le=2048)
    """Messages embedded and written per transaction by the background indexer."""
    timeout: float = Field(30.0, gt=0)
    """Seconds one embedding call may take (litellm models)."""
    min_similarity: float = Field(0.18, ge=-1, le=1)
    """Semantic hits less similar (cosine) than this are left out: every message has a nearest neighbour,
    and one about something else is noise. 0.18 suits wordllama, measured on bench.recall's corpus: its
    unrelated texts score up to 0.27 (most below 0.18) and its paraphrases mostly above 0.18, and recall@5 is
    what it was at 0.1 (docs/recall-and-providers.md); tune it for another model."""


class SemanticProviderSettings(BaseModel):
    """The `semantic` memory provider: the past messages nearest in meaning to the user's message."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["semantic"] = "semantic"
    limit: int = Field(3, ge=1, le=20)
    """Snippets injected at most (each from a different past session)."""
    timeout: float = Field(2.0, gt=0)
    """Seconds the provider may take at a turn's start before the turn goes on without it."""
    max_chars: int = Field(1500, ge=100)
    """Characters of context it may inject (cut beyond)."""


class HonchoProviderSettings(BaseModel):
    """The `honcho` memory provider (honcho-ai SDK): Honcho models the user across sessions."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["honcho"] = "honcho"
    base_url: str | None = None
    """The Honcho server; default: the SDK's (Honcho's hosted API)."""
    api_key: SecretStr | None = None
    """Default: HONCHO_API_KEY, as the SDK reads it."""
    workspace: str = "hermetic"
    user_peer: str = "user"
    agent_peer: str = "hermetic"
    timeout: float = Field(3.0, gt=0)
    max_chars: int = Field(1500, ge=100)


ProviderSettings = Annotated[SemanticProviderSettings | HonchoProviderSettings, Field(discriminator="type")]


class MemorySettings(BaseModel):
    """The curated memory files in the profile home: MEMORY.md (the agent's notes) and USER.md (the user)."""

    model_config = ConfigDict(extra="forbid")

    memory_chars: int = Field(2200, ge=100)
    """Most characters MEMORY.md may hold (entries and the separator lines between them)."""
    user_chars: int = Field(1375, ge=100)
    """Most characters USER.md may hold."""
    warn_at: float = Field(0.8, gt=0, le=1)
    """Above this share of a limit, a write also tells the user the file is nearly full."""
    embeddings: EmbeddingSettings = EmbeddingSettings()
    """HERMETIC_MEMORY__EMBEDDINGS__MODEL=wordllama|off|<litellm model>, ...__API_BASE=http://..."""
    providers: list[ProviderSettings] = []
    """Memory providers consulted at each turn's start, after memory writes and at session end, in order:
    "semantic" or {type: honcho, base_url: ...} (docs/recall-and-providers.md)."""

    @field_validator("providers", mode="before")
    @classmethod
    def _names_are_types(cls, value: Any) -> Any:
        """A bare name ("semantic") is that provider with its defaults."""
        return [{"type": v} if isinstance(v, str) else v for v in value] if isinstance(value, list) else value
