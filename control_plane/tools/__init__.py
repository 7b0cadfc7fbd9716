"""Built-in tools. Importing this package registers every tool module into TOOLS."""

from . import browser, files, memory, network, session_search, skills, terminal
from .registry import TOOLS, Registry, Tool, ToolContext, ToolResult, invoke, tool

__all__ = [
    "TOOLS",
    "Registry",
    "Tool",
    "ToolContext",
    "ToolResult",
    "browser",
    "files",
    "invoke",
    "memory",
    "network",
    "session_search",
    "skills",
    "terminal",
    "tool",
]
