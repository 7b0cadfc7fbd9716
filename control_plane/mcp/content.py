"""A tool result as MCP content: its text, then each of its images as MCP image content."""

from __future__ import annotations

from collections.abc import Sequence

import mcp_types as types

from ..events import ToolImage


def tool_content(text: str, images: Sequence[ToolImage]) -> list[types.ContentBlock]:
    blocks: list[types.ContentBlock] = [types.TextContent(text=text)]
    blocks += [types.ImageContent(data=image.data, mime_type=image.mime) for image in images]
    return blocks
