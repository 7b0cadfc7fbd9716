"""An ACP prompt's content blocks as the text of one user message. The agent reads text: a resource
link under the workspace becomes its path in the sandbox, an embedded resource its text, an image a
line saying it was there (as on /v1/chat/completions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from acp.schema import (
    AudioContentBlock,
    EmbeddedResourceContentBlock,
    ImageContentBlock,
    ResourceContentBlock,
    TextContentBlock,
    TextResourceContents,
)


def prompt_text(blocks: list[Any], workspace: Path, workdir: str) -> str:
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, ResourceContentBlock):
            parts.append(_link(block.uri, block.name, workspace, workdir))
        elif isinstance(block, EmbeddedResourceContentBlock):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                where = _where(resource.uri, workspace, workdir)
                parts.append(f'<file path="{where}">\n{resource.text}\n</file>')
            else:
                parts.append(f"[a binary file was attached: {resource.uri}; this agent reads text only]")
        elif isinstance(block, ImageContentBlock):
            parts.append(f"[an image was attached ({block.mime_type}); this agent cannot see images]")
        elif isinstance(block, AudioContentBlock):
            parts.append(f"[audio was attached ({block.mime_type}); this agent cannot hear it]")
    return "\n".join(parts)


def _link(uri: str, name: str, workspace: Path, workdir: str) -> str:
    where = _where(uri, workspace, workdir)
    if where != uri:
        return f"[the user points at {where} in your workspace]"
    return f"[the user points at {name}: {uri} (outside your workspace)]"


def _where(uri: str, workspace: Path, workdir: str) -> str:
    """A file:// URI under the editor's directory as its path in the sandbox; else the URI itself."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return uri
    path = Path(unquote(parsed.path)).resolve()
    if not path.is_relative_to(workspace):
        return uri
    return f"{workdir.rstrip('/')}/{path.relative_to(workspace)}"
