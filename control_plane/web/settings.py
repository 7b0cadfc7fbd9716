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


class WebSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    search: SearchSettings = SearchSettings()
