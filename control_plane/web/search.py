"""Web search providers, each by its published HTTP API over httpx: SearXNG (self-hosted JSON API), Brave
Search, Tavily and Exa. `search()` tries the configured provider, then its fallbacks."""

from __future__ import annotations

import datetime
from abc import ABC, abstractmethod
from typing import Any, Literal

import httpx
from pydantic import BaseModel

from ..tls import client_tls
from .settings import ProviderName, SearchSettings

Recency = Literal["day", "week", "month", "year"]
_DAYS = {"day": 1, "week": 7, "month": 31, "year": 366}


class SearchResult(BaseModel):
    title: str
    url: str
    snippet: str = ""
    date: str | None = None
    """When the page was published, as the provider gave it (ISO date, or "3 days ago")."""


class SearchFailed(Exception):
    """One provider could not answer; the message says why and what to do."""


class Provider(ABC):
    name: ProviderName

    def __init__(self, settings: SearchSettings) -> None:
        self.settings = settings

    def search(self, query: str, limit: int, recency: Recency | None) -> list[SearchResult]:
        """Raises SearchFailed (not configured, unreachable, an error status, an unreadable answer)."""
        try:
            with httpx.Client(
                timeout=self.settings.timeout, follow_redirects=False, verify=client_tls()
            ) as client:
                response = self._request(client, query, limit, recency)
                response.raise_for_status()
                body = response.json()
        except httpx.HTTPStatusError as exc:
            detail = exc.response.text[:200].strip()
            raise SearchFailed(f"{self.name} answered HTTP {exc.response.status_code}: {detail}") from exc
        except httpx.HTTPError as exc:
            raise SearchFailed(f"{self.name} is unreachable: {type(exc).__name__}: {exc}") from exc
        except ValueError as exc:
            raise SearchFailed(f"{self.name} answered something that is not JSON") from exc
        try:
            return self._results(body)[:limit]
        except (KeyError, TypeError, AttributeError) as exc:
            raise SearchFailed(f"{self.name}'s answer is not shaped as its API says ({exc!r})") from exc

    @abstractmethod
    def _request(
        self, client: httpx.Client, query: str, limit: int, recency: Recency | None
    ) -> httpx.Response: ...

    @abstractmethod
    def _results(self, body: Any) -> list[SearchResult]: ...

    def _key(self, key: Any, setting: str) -> str:
        if key is None or not key.get_secret_value():
            raise SearchFailed(f"{self.name} needs an API key: set web.search.{setting}")
        return str(key.get_secret_value())


class SearXNG(Provider):
    """GET /search?q=...&format=json (the instance must enable the json format)."""

    name = "searxng"

    def _request(
        self, client: httpx.Client, query: str, limit: int, recency: Recency | None
    ) -> httpx.Response:
        if not self.settings.searxng_url:
            raise SearchFailed("searxng needs the instance's address: set web.search.searxng_url")
        params = {"q": query, "format": "json", **({"time_range": recency} if recency else {})}
        return client.get(self.settings.searxng_url.rstrip("/") + "/search", params=params)

    def _results(self, body: Any) -> list[SearchResult]:
        return _shaped(body["results"], "content", "publishedDate")


class Brave(Provider):
    """GET /res/v1/web/search with the X-Subscription-Token header; freshness pd/pw/pm/py."""

    name = "brave"

    def _request(
        self, client: httpx.Client, query: str, limit: int, recency: Recency | None
    ) -> httpx.Response:
        token = self._key(self.settings.brave_api_key, "brave_api_key")
        params: dict[str, Any] = {"q": query, "count": min(limit, 20)}
        if recency:
            params["freshness"] = "p" + recency[0]
        headers = {"Accept": "application/json", "X-Subscription-Token": token}
        return client.get(
            self.settings.brave_url.rstrip("/") + "/res/v1/web/search", params=params, headers=headers
        )

    def _results(self, body: Any) -> list[SearchResult]:
        return _shaped((body.get("web") or {}).get("results", []), "description", "page_age", "age")


class Tavily(Provider):
    """POST /search with a bearer key; time_range day/week/month/year."""

    name = "tavily"

    def _request(
        self, client: httpx.Client, query: str, limit: int, recency: Recency | None
    ) -> httpx.Response:
        key = self._key(self.settings.tavily_api_key, "tavily_api_key")
        payload: dict[str, Any] = {"query": query, "max_results": min(limit, 20)}
        if recency:
            payload["time_range"] = recency
        headers = {"Authorization": f"Bearer {key}"}
        return client.post(self.settings.tavily_url.rstrip("/") + "/search", json=payload, headers=headers)

    def _results(self, body: Any) -> list[SearchResult]:
        return _shaped(body["results"], "content", "published_date")


class Exa(Provider):
    """POST /search with the x-api-key header; recency as startPublishedDate; highlights as snippets."""

    name = "exa"

    def _request(
        self, client: httpx.Client, query: str, limit: int, recency: Recency | None
    ) -> httpx.Response:
        key = self._key(self.settings.exa_api_key, "exa_api_key")
        payload: dict[str, Any] = {
            "query": query,
            "numResults": min(limit, 25),
            "contents": {"highlights": True},
        }
        if recency:
            since = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=_DAYS[recency])
            payload["startPublishedDate"] = since.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        return client.post(
            self.settings.exa_url.rstrip("/") + "/search", json=payload, headers={"x-api-key": key}
        )

    def _results(self, body: Any) -> list[SearchResult]:
        items = [
            {**item, "snippet": " ... ".join(item.get("highlights") or []) or (item.get("text") or "")[:500]}
            for item in body["results"]
        ]
        return _shaped(items, "snippet", "publishedDate")


def _shaped(items: list[dict[str, Any]], snippet: str, *dates: str) -> list[SearchResult]:
    """A provider's result items as SearchResults: its field for the snippet, its fields for the date."""
    return [
        SearchResult(
            title=item.get("title") or item["url"],
            url=item["url"],
            snippet=item.get(snippet) or "",
            date=next((item[key] for key in dates if item.get(key)), None),
        )
        for item in items
    ]


PROVIDERS: dict[str, type[Provider]] = {cls.name: cls for cls in (SearXNG, Brave, Tavily, Exa)}


def search(
    settings: SearchSettings, query: str, limit: int, recency: Recency | None
) -> tuple[str, list[SearchResult], list[str]]:
    """The first provider (web.search.provider, then its fallbacks) that answers: its name, its results
    and why the ones before it failed. Raises SearchFailed when none is configured or all failed."""
    if settings.provider is None:
        raise SearchFailed(
            "no search provider is configured: set web.search.provider to searxng, brave, tavily or exa "
            "(with its key or address; see docs/toolbox.md)"
        )
    order = list(dict.fromkeys([settings.provider, *settings.fallbacks]))
    failures: list[str] = []
    for name in order:
        try:
            return name, PROVIDERS[name](settings).search(query, limit, recency), failures
        except SearchFailed as exc:
            failures.append(str(exc))
    raise SearchFailed("every search provider failed: " + "; ".join(failures))
