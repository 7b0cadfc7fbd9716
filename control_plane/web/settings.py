"""The `web:` settings: which search provider answers web_search, its fallbacks, keys and endpoints."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

ProviderName = Literal["searxng", "brave", "tavily", "exa"]


class SearchSettings(BaseModel):
    """HERMETIC_WEB__SEARCH__PROVIDER=brave, HERMETIC_WEB__SEARCH__BRAVE_API_KEY=..., or config.yaml
    `web: {search: {provider: brave, brave_api_key: ${BRAVE_API_KEY}}}`."""

    model_config = ConfigDict(extra="forbid")

    provider: ProviderName | None = None
    """Who answers web_search; None: the tool says how to choose one."""
    fallbacks: list[ProviderName] = []
    """Tried in order when the provider fails (unreachable, an error status, no key)."""
    timeout: float = Field(15.0, gt=0)
    """Seconds one provider may take to answer."""
    searxng_url: str | None = None
    """A SearXNG instance with the JSON format enabled (settings.yml `search.formats: [html, json]`)."""
    brave_api_key: SecretStr | None = None
    brave_url: str = "https://api.search.brave.com"
    tavily_api_key: SecretStr | None = None
    tavily_url: str = "https://api.tavily.com"
    exa_api_key: SecretStr | None = None
    exa_url: str = "https://api.exa.ai"

    def keys(self) -> list[str]:
        """The configured keys (for redaction)."""
        found = (self.brave_api_key, self.tavily_api_key, self.exa_api_key)
        return [key.get_secret_value() for key in found if key is not None and key.get_secret_value()]


class ExtractSettings(BaseModel):
    """web_extract's bounds (HERMETIC_WEB__EXTRACT__MAX_CHARS=...). Which hosts it reaches is the
    profile's egress policy: `sandbox.network` and `sandbox.allow`, as for the sandboxes."""

    model_config = ConfigDict(extra="forbid")

    max_chars: int = Field(15_000, ge=500)
    """Characters of one page the model reads (with `focus`, the paragraphs that mention it first)."""
    max_bytes: int = Field(5_000_000, ge=10_000)
    """Bytes of one page that are downloaded; the rest is not read (the page is said to be cut)."""
    timeout: float = Field(15.0, gt=0)
    """Seconds to connect, and between bytes, per page."""
    ca_file: str | None = None
    """Extra CA certificates (PEM) to trust for https, e.g. a corporate proxy's; the system's otherwise."""


class WebSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    search: SearchSettings = SearchSettings()
    extract: ExtractSettings = ExtractSettings()
