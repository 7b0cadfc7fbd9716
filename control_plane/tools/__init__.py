"""Built-in tools. Importing this package registers every tool module into TOOLS."""

from . import (
    browser,
    clarify,
    code,
    delegate,
    files,
    memory,
    network,
    python_kernel,
    session_search,
    skills,
    terminal,
    todo,
    vision,
    web,
)
from .registry import TOOLS, Registry, Tool, ToolContext, ToolOutcome, ToolResult, invoke, tool

__all__ = [
    "TOOLS",
    "Registry",
    "Tool",
    "ToolContext",
    "ToolOutcome",
    "ToolResult",
    "browser",
    "clarify",
    "code",
    "delegate",
    "files",
    "invoke",
    "memory",
    "network",
    "python_kernel",
    "session_search",
    "skills",
    "terminal",
    "todo",
    "tool",
    "vision",
    "web",
]
