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


class Mem0Endpoint(BaseModel):
    """An OpenAI-compatible server the mem0 provider calls: chat completions or embeddings."""

    model_config = ConfigDict(extra="forbid")

    model: str
    """The model's name as the server knows it, no litellm prefix ("gpt-4.1-mini", "nomic-embed-text")."""
    api_base: str | None = None
    """The server's URL, /v1 included ("http://127.0.0.1:11434/v1"); default: OPENAI_BASE_URL, else OpenAI."""
    api_key: SecretStr | None = None
    """Default: OPENAI_API_KEY, as mem0 reads it."""

    @classmethod
    def from_litellm(
        cls, name: str | None, api_base: str | None, api_key: SecretStr | None
    ) -> Mem0Endpoint | None:
        """A litellm model reached through the OpenAI protocol (`openai/NAME`), else None."""
        route, _, model = (name or "").partition("/")
        return cls(model=model, api_base=api_base, api_key=api_key) if route == "openai" and model else None


class Mem0ProviderSettings(BaseModel):
    """The `mem0` memory provider (mem0ai, self-hosted): facts about the user that mem0's LLM extracts from
    each session, kept in an embedded Qdrant in the profile home, searched by meaning at a turn's start."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["mem0"] = "mem0"
    user_id: str | None = None
    """Whose memories these are, in mem0's terms; default: the profile's name."""
    limit: int = Field(5, ge=1, le=50)
    """Memories injected at most."""
    min_score: float = Field(0.1, ge=0, le=1)
    """mem0's search threshold (its default): memories scoring less for the user's message are left out (the
    score is the cosine similarity, with keyword and entity boosts when spaCy and fastembed are installed)."""
    llm: Mem0Endpoint | None = None
    """The model that extracts the facts; default: the profile's model when it is an `openai/...` one."""
    embedder: Mem0Endpoint | None = None
    """The embedding model; default: memory.embeddings when it is an `openai/...` one."""
    timeout: float = Field(10.0, gt=0)
    """Seconds each hook (and each of mem0's model calls) may take; extraction at a session's end is one
    LLM call."""
    max_chars: int = Field(1500, ge=100)

    def endpoints(
        self,
        model: str | None,
        api_base: str | None,
        api_key: SecretStr | None,
        embeddings: EmbeddingSettings,
    ) -> tuple[Mem0Endpoint, Mem0Endpoint]:
        """(llm, embedder): the configured ones or the profile's. Raises ValueError saying what to set."""
        llm = self.llm or Mem0Endpoint.from_litellm(model, api_base, api_key)
        if llm is None:
            raise ValueError(
                f"memory provider mem0: the profile's model {model or '(none)'} is not an OpenAI-compatible "
                "`openai/...` one; set the provider's llm: {model: ..., api_base: ...}"
            )
        embedder = self.embedder or Mem0Endpoint.from_litellm(
            embeddings.model, embeddings.api_base, embeddings.api_key
        )
        if embedder is None:
            raise ValueError(
                f"memory provider mem0: memory.embeddings.model {embeddings.model} runs inside Hermetic "
                "and mem0 cannot call it; set the provider's embedder: {model: ..., api_base: ...} (an "
                "OpenAI-compatible /v1/embeddings) or memory.embeddings.model: openai/..."
            )
        return llm, embedder


ProviderSettings = Annotated[
    SemanticProviderSettings | HonchoProviderSettings | Mem0ProviderSettings, Field(discriminator="type")
]


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
    "semantic", {type: honcho, base_url: ...} or {type: mem0, ...} (docs/recall-and-providers.md)."""

    @field_validator("providers", mode="before")
    @classmethod
    def _names_are_types(cls, value: Any) -> Any:
        """A bare name ("semantic") is that provider with its defaults."""
        return [{"type": v} if isinstance(v, str) else v for v in value] if isinstance(value, list) else value
