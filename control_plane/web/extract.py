"""A fetched page as readable Markdown: trafilatura for HTML (boilerplate removed: menus, footers,
cookie banners), text types as they are; a PDF or another binary type is refused with what to do."""

from __future__ import annotations

import re

from .fetch import Page

HTML_TYPES = ("text/html", "application/xhtml+xml")
TEXT_TYPES = ("text/plain", "text/markdown", "text/csv", "application/json", "text/xml", "application/xml")


class NotReadable(Exception):
    """The page is not something web_extract turns into text; the message says what to do instead."""


def readable(page: Page) -> str:
    kind = page.content_type or "an unknown type"
    if kind in HTML_TYPES or (not page.content_type and page.body.lstrip()[:1] == b"<"):
        import trafilatura  # on first use: a tenth of a second of every process's start-up otherwise

        text = trafilatura.extract(
            page.body, url=page.url, output_format="markdown", include_links=True, include_tables=True
        )
        if not text:
            raise NotReadable("the page has no readable text (a script-only page? try the browser tool)")
        return str(text)
    if kind in TEXT_TYPES:
        return page.body.decode("utf-8", "replace")
    if kind == "application/pdf":
        raise NotReadable(
            "a PDF: web_extract reads HTML and text; download it in the sandbox (with the host allowed) "
            "and read it there (pdftotext, a Python PDF library)"
        )
    raise NotReadable(f"{kind} is not a page web_extract reads (HTML or text); download it in the sandbox")


def focused(text: str, focus: str | None, limit: int) -> tuple[str, bool]:
    """At most `limit` characters of `text`: with `focus`, the paragraphs that mention its words come
    first (in page order), then the others; True when something was left out."""
    if len(text) <= limit:
        return text, False
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    if focus:
        words = {w for w in re.findall(r"\w{3,}", focus.lower())}
        hits = [p for p in paragraphs if words & set(re.findall(r"\w{3,}", p.lower()))]
        paragraphs = hits + [p for p in paragraphs if p not in hits]
    kept: list[str] = []
    size = 0
    for paragraph in paragraphs:
        if size + len(paragraph) + 2 > limit:
            if not kept:
                kept.append(paragraph[:limit])
            break
        kept.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(kept), True
