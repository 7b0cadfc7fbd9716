"""Browser tools: a Chromium driven by Playwright inside the session's sandbox.

Pages are described by an accessibility snapshot whose elements carry refs (e.g. `e12`); actions
name those refs. Each action returns the page's new snapshot, so the model always sees where it is.
A screenshot is saved in the workspace and comes back as an image of the result.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from .images import ImageError, tool_image
from .network import egress_note
from .registry import ToolContext, ToolResult, tool

REF = "An element ref from the latest snapshot, e.g. e12."


def _page(ctx: ToolContext, action: Mapping[str, Any] | None = None) -> ToolResult:
    """The page's snapshot after an action (whose own fields come first): the action's own when it
    brought one (navigate does), else taken now."""
    snap = action if action and "snapshot" in action else ctx.sandbox.runtime.browser_snapshot()
    head = f"url: {snap['url']}\ntitle: {snap['title']}\n"
    if action and action.get("status") is not None:
        head += f"status: {action['status']}\n"
    return ToolResult(head + snap["snapshot"] + egress_note(ctx.sandbox))


class NavigateArgs(BaseModel):
    url: str = Field(description="The URL to open (http, https, file).")


@tool("browser_navigate", toolset="browser")
def browser_navigate(ctx: ToolContext, args: NavigateArgs) -> ToolResult:
    """Open a URL in the sandbox's browser and return the page's accessibility snapshot."""
    return _page(ctx, ctx.sandbox.runtime.browser_navigate(url=args.url, call_timeout=60))


class NoArgs(BaseModel):
    pass


@tool("browser_snapshot", toolset="browser")
def browser_snapshot(ctx: ToolContext, args: NoArgs) -> ToolResult:
    """The current page's accessibility snapshot, with element refs to act on."""
    return _page(ctx)


class ClickArgs(BaseModel):
    ref: str = Field(description=REF)


@tool("browser_click", toolset="browser")
def browser_click(ctx: ToolContext, args: ClickArgs) -> ToolResult:
    """Click an element; returns the page's new snapshot."""
    return _page(ctx, ctx.sandbox.runtime.browser_click(ref=args.ref))


class TypeArgs(BaseModel):
    ref: str = Field(description=REF)
    text: str = Field(description="Text to put in the field (replaces what is there).")
    submit: bool = Field(False, description="Press Enter afterwards.")


@tool("browser_type", toolset="browser")
def browser_type(ctx: ToolContext, args: TypeArgs) -> ToolResult:
    """Fill a text field; returns the page's new snapshot."""
    return _page(ctx, ctx.sandbox.runtime.browser_type(ref=args.ref, text=args.text, submit=args.submit))


class PressArgs(BaseModel):
    key: str = Field(description="A key name: Enter, Escape, ArrowDown, Control+a ...")
    ref: str | None = Field(None, description="Element to press it on; default: the focused one.")


@tool("browser_press", toolset="browser")
def browser_press(ctx: ToolContext, args: PressArgs) -> ToolResult:
    """Press a key; returns the page's new snapshot."""
    return _page(ctx, ctx.sandbox.runtime.browser_press(key=args.key, ref=args.ref))


class ScrollArgs(BaseModel):
    direction: Literal["up", "down", "left", "right"] = "down"
    ref: str | None = Field(None, description="Scroll this element into view instead.")


@tool("browser_scroll", toolset="browser")
def browser_scroll(ctx: ToolContext, args: ScrollArgs) -> ToolResult:
    """Scroll the page by most of a screen (or bring an element into view); returns the new snapshot."""
    return _page(ctx, ctx.sandbox.runtime.browser_scroll(direction=args.direction, ref=args.ref))


@tool("browser_back", toolset="browser")
def browser_back(ctx: ToolContext, args: NoArgs) -> ToolResult:
    """Go back in history; returns the page's snapshot."""
    return _page(ctx, ctx.sandbox.runtime.browser_back())


@tool("browser_console", toolset="browser", parallel_safe=True)
def browser_console(ctx: ToolContext, args: NoArgs) -> ToolResult:
    """Console messages and page errors since the last call."""
    logged = ctx.sandbox.runtime.browser_console()
    lines = [f"[{m.get('type', 'log')}] {m.get('text', '')}" for m in logged["messages"]]
    if logged["dropped"]:
        lines.append(f"[{logged['dropped']} older messages dropped]")
    return ToolResult("\n".join(lines) or "no console messages")


class ScreenshotArgs(BaseModel):
    full_page: bool = Field(False, description="The whole page (up to a cap), not only the window.")


@tool("browser_screenshot", toolset="browser")
def browser_screenshot(ctx: ToolContext, args: ScreenshotArgs) -> ToolResult:
    """Screenshot the page: saved under screenshots/ in the workspace and shown to you as an image when
    you can see images (without vision, use browser_snapshot; to ask about it, browser_vision)."""
    shot = ctx.sandbox.runtime.browser_screenshot(full_page=args.full_page, call_timeout=60)
    path = f"screenshots/screenshot-{int(time.time() * 1000)}.png"
    ctx.sandbox.runtime.fs_write(path=path, data=shot["png"])
    clipped = " (cut to the cap)" if shot.get("clipped") else ""
    text = f"[screenshot saved to {path}: {shot['width']}x{shot['height']} PNG{clipped}]"
    try:
        image = tool_image(base64.b64decode(shot["png"]), path)
    except ImageError as exc:  # the browser's own PNG: only a broken renderer gets here
        return ToolResult(f"{text}\nerror: it cannot be shown: {exc}", ok=False)
    return ToolResult(text, images=[image])
