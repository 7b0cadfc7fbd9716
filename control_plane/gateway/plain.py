"""The model's Markdown as plain text, for platforms that show no markup (IRC, XMPP bodies): mdit-plain's
renderer for markdown-it-py, taught to keep what plain text can still say (link targets, list bullets
and numbers, quote marks); code stays as written. And what in a group chat line is said to the bot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token
from mdit_plain.renderer import RendererPlain


class _Renderer(RendererPlain):  # type: ignore[misc]  # mdit-plain ships no types
    def render_list_item_open(self, tokens: Sequence[Token], i: int, options: Any, env: Any) -> str:
        token = tokens[i]
        return f"\n{token.info}. " if token.info else "\n- "

    def render_link_open(self, tokens: Sequence[Token], i: int, options: Any, env: Any) -> str:
        env.setdefault("links", []).append(str(tokens[i].attrs.get("href", "")))
        return ""

    def render_link_close(self, tokens: Sequence[Token], i: int, options: Any, env: Any) -> str:
        href = env["links"].pop()
        text = tokens[i - 1].content if i else ""
        return "" if not href or href == text else f" ({href})"

    def render_image(self, tokens: Sequence[Token], i: int, options: Any, env: Any) -> str:
        tokens[i].children = None  # its alt text is said here, not again by the children
        return f"{tokens[i].content} ({tokens[i].attrs.get('src', '')})"

    def render_blockquote_open(self, tokens: Sequence[Token], i: int, options: Any, env: Any) -> str:
        env["quote"] = env.get("quote", 0) + 1
        return ""

    def render_blockquote_close(self, tokens: Sequence[Token], i: int, options: Any, env: Any) -> str:
        env["quote"] -= 1
        return ""

    def render_paragraph_open(self, tokens: Sequence[Token], i: int, options: Any, env: Any) -> str:
        opened: str = super().render_paragraph_open(tokens, i, options, env)
        return opened + "> " * env.get("quote", 0)

    def render_softbreak(self, tokens: Sequence[Token], i: int, options: Any, env: Any) -> str:
        return "\n" + "> " * env.get("quote", 0)


_MARKDOWN = MarkdownIt("commonmark", renderer_cls=_Renderer)


def to_plain(markdown: str) -> str:
    """`markdown` as plain text; blank lines between blocks kept at one."""
    lines = _MARKDOWN.render(markdown).splitlines()
    kept = [line for n, line in enumerate(lines) if line.strip() or (n and lines[n - 1].strip())]
    return "\n".join(kept).strip("\n")


def addressed(text: str, nick: str) -> str | None:
    """What follows `nick: ` or `nick, ` at the start of a group chat line (None: said to others)."""
    head, _, rest = text.partition(" ")
    if head[:-1].lower() != nick.lower() or head[-1:] not in (":", ","):
        return None
    return rest.strip()
